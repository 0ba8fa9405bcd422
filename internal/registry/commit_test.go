package registry

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/registry/httpfront"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// slowStore is a store whose every Apply takes as long as an fsync, and
// which remembers what it holds and how many transactions it took.
type slowStore struct {
	store.Memory
	fsync time.Duration

	mu    sync.Mutex
	txs   int
	held  map[registryapi.InstanceRef]bool
	order []string // "+APP/id" or "-APP/id", as applied
	fail  error
}

func (s *slowStore) Apply(bs ...store.Batch) error {
	time.Sleep(s.fsync)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.txs++
	if s.held == nil {
		s.held = map[registryapi.InstanceRef]bool{}
	}
	for _, b := range bs {
		for _, in := range b.Put {
			s.held[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}] = true
			s.order = append(s.order, "+"+in.App+"/"+in.InstanceID)
		}
		for _, ref := range b.Delete {
			delete(s.held, ref)
			s.order = append(s.order, "-"+ref.App+"/"+ref.ID)
		}
	}
	return nil
}

func (s *slowStore) holds(ref registryapi.InstanceRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[ref]
}

// Concurrent writes share transactions (one fsync for many), each is
// answered only once its transaction is done, and the store sees them in
// the order memory did.
func TestGroupCommit(t *testing.T) {
	st := &slowStore{fsync: 5 * time.Millisecond}
	r, _ := newTestRegistry(t, Options{Store: st})
	const writers, each = 50, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := r.Register("ORDERS", testInstance("ORDERS", id, 5, 30)); err != nil {
					errs <- err
					return
				}
				if !st.holds(registryapi.InstanceRef{App: "ORDERS", ID: id}) {
					errs <- fmt.Errorf("%s answered before the store held it", id)
				}
				if i%2 == 1 {
					if err := r.Cancel("ORDERS", id); err != nil {
						errs <- err
						return
					}
					if st.holds(registryapi.InstanceRef{App: "ORDERS", ID: id}) {
						errs <- fmt.Errorf("%s cancelled, answered while the store still held it", id)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st.mu.Lock()
	txs, writes := st.txs, len(st.order)
	st.mu.Unlock()
	t.Logf("%d writes in %d transactions", writes, txs)
	if txs >= writes/2 {
		t.Errorf("%d writes took %d transactions: want them grouped", writes, txs)
	}
	if got, want := len(r.Instances("ORDERS")), writers*each/2; got != want {
		t.Errorf("%d instances in memory, want %d", got, want)
	}
	for _, in := range r.Instances("ORDERS") {
		if !st.holds(registryapi.InstanceRef{App: in.App, ID: in.InstanceID}) {
			t.Errorf("%s in memory, not in the store", in.InstanceID)
		}
	}
	// Per instance, the store saw register before cancel.
	st.mu.Lock()
	defer st.mu.Unlock()
	for w := range writers {
		id := fmt.Sprintf("ORDERS/w%d-1", w)
		if add, del := slices.Index(st.order, "+"+id), slices.Index(st.order, "-"+id); add < 0 || del < add {
			t.Errorf("%s: register at %d, cancel at %d in the store's order", id, add, del)
		}
	}
}

// A failed commit fails the writes in it and every write after it, and
// the registry says it is not ready; reads go on from memory.
func TestStoreFailureRefusesWrites(t *testing.T) {
	st := &slowStore{}
	r, _ := newTestRegistry(t, Options{Store: st})
	if err := r.Register("ORDERS", testInstance("ORDERS", "a", 5, 30)); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.fail = errors.New("disk full")
	st.mu.Unlock()
	err := r.Register("ORDERS", testInstance("ORDERS", "b", 5, 30))
	if err == nil || !errors.Is(err, st.fail) {
		t.Fatalf("register while the store fails: %v, want the store's error", err)
	}
	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	for name, write := range map[string]func() error{
		"register": func() error { return r.Register("ORDERS", testInstance("ORDERS", "c", 5, 30)) },
		"cancel":   func() error { return r.Cancel("ORDERS", "a") },
		"status": func() error {
			return r.SetOverride("ORDERS", "a", registryapi.Override{Status: registryapi.StatusOutOfService})
		},
		"metadata": func() error { return r.SetMetadata("ORDERS", "a", map[string]string{"k": "v"}) },
	} {
		if err := write(); !errors.Is(err, errStoreFailed) {
			t.Errorf("%s after a failed commit: %v, want refused", name, err)
		}
	}
	if _, err := r.Instance("ORDERS", "a"); err != nil {
		t.Errorf("read after a failed commit: %v", err)
	}
	rec := httptest.NewRecorder()
	httpfront.Handler(r, httpfront.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after a failed commit: %d %s, want 503", rec.Code, rec.Body)
	}
}

// A fetch shows every write within ReadStaleness, and none older is
// missing; with a negative ReadStaleness, the fetch right after a write
// holds it.
func TestFetchSeesTheWriteBefore(t *testing.T) {
	for _, staleness := range []time.Duration{-1, DefaultReadStaleness} {
		t.Run(fmt.Sprint(staleness), func(t *testing.T) {
			r, _ := newTestRegistry(t, Options{ReadStaleness: staleness})
			for i := range 200 {
				id := fmt.Sprintf("i-%d", i)
				if err := r.Register("ORDERS", testInstance("ORDERS", id, 5, 30)); err != nil {
					t.Fatal(err)
				}
				acked := time.Now()
				s := r.current()
				if staleness > 0 && time.Since(acked) < staleness/2 && len(s.instances) < i {
					t.Fatalf("the fetch after registering %s misses a registration older than it (%d instances)", id, len(s.instances))
				}
				if staleness > 0 {
					time.Sleep(time.Until(acked.Add(staleness)))
					s = r.current()
				}
				if !slices.ContainsFunc(s.instances, func(in *registryapi.Instance) bool { return in.InstanceID == id }) {
					t.Fatalf("the fetch %v after registering %s lacks it (snapshot version %d)", max(staleness, 0), id, s.version)
				}
				if len(s.instances) != i+1 {
					t.Fatalf("%d instances in the snapshot after %d registrations", len(s.instances), i+1)
				}
			}
		})
	}
}
