package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// boltStore keeps the registry in one bbolt file. Every Apply is one
// fsync'ed transaction, so what the registry acknowledged survives a kill.
type boltStore struct {
	db   *bolt.DB
	path string
}

var (
	bucketInstances   = []byte("instances")   // app \x00 id -> instance JSON
	bucketOverrides   = []byte("overrides")   // app \x00 id -> registryapi.Override JSON
	bucketSlots       = []byte("slots")       // app \x00 id -> slot
	bucketDeployments = []byte("deployments") // seq (big endian) -> deployment JSON
	bucketCutovers    = []byte("cutovers")    // name -> cutover JSON
)

// OpenBoltStore opens (or creates) the store of `--store bolt:PATH`.
func OpenBoltStore(path string) (_ Store, err error) {
	// bbolt panics on some damaged files (a truncated one, etcd-io/bbolt
	// #446), and a file cut short under its mmap faults: both must be an
	// error that names the file, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("open %s: the file is damaged (%v); restore it from a backup or move it away to start empty", path, v)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w: is another registry using it?", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketInstances, bucketOverrides, bucketSlots, bucketDeployments, bucketCutovers} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare %s: %w", path, err)
	}
	return &boltStore{db: db, path: path}, nil
}

func refKey(app, id string) []byte { return []byte(app + "\x00" + id) }

func splitRefKey(k []byte) (registryapi.InstanceRef, bool) {
	app, id, ok := strings.Cut(string(k), "\x00")
	return registryapi.InstanceRef{App: app, ID: id}, ok
}

// storedInstance is the stored form: every field of Instance by name.
type storedInstance registryapi.Instance

func (s *boltStore) Load() (_ *State, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("read %s: the file is damaged (%v)", s.path, v)
		}
	}()
	st := &State{Overrides: map[registryapi.InstanceRef]registryapi.Override{}, Slots: map[registryapi.InstanceRef]int{}}
	err = s.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketInstances).ForEach(func(k, v []byte) error {
			var in storedInstance
			if err := json.Unmarshal(v, &in); err != nil {
				return fmt.Errorf("instance %q: %w", k, err)
			}
			st.Instances = append(st.Instances, (*registryapi.Instance)(&in))
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOverrides).ForEach(func(k, v []byte) error {
			ref, ok := splitRefKey(k)
			var o registryapi.Override
			if err := json.Unmarshal(v, &o); err != nil || !ok {
				return fmt.Errorf("override %q: malformed", k)
			}
			st.Overrides[ref] = o
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketSlots).ForEach(func(k, v []byte) error {
			ref, ok := splitRefKey(k)
			n, err := strconv.Atoi(string(v))
			if err != nil || !ok {
				return fmt.Errorf("slot %q: malformed", k)
			}
			st.Slots[ref] = n
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketDeployments).ForEach(func(k, v []byte) error {
			var d ledger.Deployment
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("deployment %d: %w", binary.BigEndian.Uint64(k), err)
			}
			st.Deployments = append(st.Deployments, d)
			return nil
		}); err != nil {
			return err
		}
		return tx.Bucket(bucketCutovers).ForEach(func(k, v []byte) error {
			var c registryapi.Cutover
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("cutover %q: %w", k, err)
			}
			st.Cutovers = append(st.Cutovers, c)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	return st, nil
}

func (s *boltStore) Apply(bs ...Batch) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range bs {
			if err := applyBatch(tx, b); err != nil {
				return err
			}
		}
		return nil
	})
}

func applyBatch(tx *bolt.Tx, b Batch) error {
	put := func(bucket, k []byte, v any) error {
		enc, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return tx.Bucket(bucket).Put(k, enc)
	}
	for _, in := range b.Put {
		if err := put(bucketInstances, refKey(in.App, in.InstanceID), (*storedInstance)(in)); err != nil {
			return err
		}
	}
	for _, ref := range b.Delete {
		if err := tx.Bucket(bucketInstances).Delete(refKey(ref.App, ref.ID)); err != nil {
			return err
		}
	}
	for ref, o := range b.Overrides {
		var err error
		if o.Zero() {
			err = tx.Bucket(bucketOverrides).Delete(refKey(ref.App, ref.ID))
		} else {
			err = put(bucketOverrides, refKey(ref.App, ref.ID), o)
		}
		if err != nil {
			return err
		}
	}
	for ref, slot := range b.Slots {
		var err error
		if slot == 0 {
			err = tx.Bucket(bucketSlots).Delete(refKey(ref.App, ref.ID))
		} else {
			err = tx.Bucket(bucketSlots).Put(refKey(ref.App, ref.ID), []byte(strconv.Itoa(slot)))
		}
		if err != nil {
			return err
		}
	}
	for _, d := range b.Deployments {
		var k [8]byte
		binary.BigEndian.PutUint64(k[:], uint64(d.Seq))
		if err := put(bucketDeployments, k[:], d); err != nil {
			return err
		}
	}
	for _, c := range b.Cutovers {
		if err := put(bucketCutovers, []byte(c.Name), c); err != nil {
			return err
		}
	}
	return nil
}

func (s *boltStore) Close() error { return s.db.Close() }

// OpenStore opens a store named as on the command line: memory,
// bolt:PATH or etcd:URL[,URL] (keys under prefix, reached as login says).
func OpenStore(spec, prefix string, login EtcdLogin) (Store, error) {
	switch kind, arg, _ := strings.Cut(spec, ":"); kind {
	case "", "memory":
		return NewMemoryStore(), nil
	case "bolt":
		if arg == "" {
			return nil, fmt.Errorf("--store bolt:PATH needs a file path")
		}
		return OpenBoltStore(arg)
	case "etcd":
		var urls []string
		for _, u := range strings.Split(arg, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
		return OpenEtcdStore(urls, prefix, login)
	default:
		return nil, fmt.Errorf("--store %q: expected memory, bolt:PATH or etcd:URL[,URL]", spec)
	}
}
