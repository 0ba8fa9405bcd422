package registry

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/ledger"
	bolt "go.etcd.io/bbolt"
)

// boltStore keeps the registry in one bbolt file. Every write is its own
// fsync'ed transaction, so what the registry acknowledged survives a kill.
type boltStore struct{ db *bolt.DB }

var (
	bucketInstances   = []byte("instances")   // app \x00 id -> instance JSON
	bucketOverrides   = []byte("overrides")   // app \x00 id -> Override JSON
	bucketSlots       = []byte("slots")       // app \x00 id -> slot
	bucketDeployments = []byte("deployments") // seq (big endian) -> deployment JSON
)

// OpenBoltStore opens (or creates) the store of `--store bolt:PATH`.
func OpenBoltStore(path string) (Store, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (is another registry using it?)", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketInstances, bucketOverrides, bucketSlots, bucketDeployments} {
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
	return &boltStore{db: db}, nil
}

func refKey(app, id string) []byte { return []byte(app + "\x00" + id) }

func splitRefKey(k []byte) (InstanceRef, bool) {
	app, id, ok := strings.Cut(string(k), "\x00")
	return InstanceRef{app, id}, ok
}

// storedInstance is the stored form: every field of Instance by name.
type storedInstance Instance

func (s *boltStore) Load() (*State, error) {
	st := &State{Overrides: map[InstanceRef]Override{}, Slots: map[InstanceRef]int{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketInstances).ForEach(func(k, v []byte) error {
			var in storedInstance
			if err := json.Unmarshal(v, &in); err != nil {
				return fmt.Errorf("instance %q: %w", k, err)
			}
			st.Instances = append(st.Instances, (*Instance)(&in))
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOverrides).ForEach(func(k, v []byte) error {
			ref, ok := splitRefKey(k)
			var o Override
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
		return tx.Bucket(bucketDeployments).ForEach(func(k, v []byte) error {
			var d ledger.Deployment
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("deployment %d: %w", binary.BigEndian.Uint64(k), err)
			}
			st.Deployments = append(st.Deployments, d)
			return nil
		})
	})
	return st, err
}

func (s *boltStore) put(bucket, k []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put(k, b) })
}

func (s *boltStore) del(bucket, k []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete(k) })
}

func (s *boltStore) PutInstance(in *Instance) error {
	return s.put(bucketInstances, refKey(in.App, in.InstanceID), (*storedInstance)(in))
}

func (s *boltStore) DeleteInstance(app, id string) error {
	return s.del(bucketInstances, refKey(app, id))
}

func (s *boltStore) PutOverride(app, id string, o Override) error {
	if o.zero() {
		return s.del(bucketOverrides, refKey(app, id))
	}
	return s.put(bucketOverrides, refKey(app, id), o)
}

func (s *boltStore) PutSlot(app, id string, slot int) error {
	if slot == 0 {
		return s.del(bucketSlots, refKey(app, id))
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSlots).Put(refKey(app, id), []byte(strconv.Itoa(slot)))
	})
}

func (s *boltStore) PutDeployment(d ledger.Deployment) error {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], uint64(d.Seq))
	return s.put(bucketDeployments, k[:], d)
}

func (s *boltStore) Close() error { return s.db.Close() }

// OpenStore opens a store named as on the command line: memory or
// bolt:PATH.
func OpenStore(spec string) (Store, error) {
	switch kind, arg, _ := strings.Cut(spec, ":"); kind {
	case "", "memory":
		return NewMemoryStore(), nil
	case "bolt":
		if arg == "" {
			return nil, fmt.Errorf("--store bolt:PATH needs a file path")
		}
		return OpenBoltStore(arg)
	case "etcd":
		return nil, fmt.Errorf("--store etcd: not built yet (it comes with the high-availability issue); use memory or bolt:PATH")
	default:
		return nil, fmt.Errorf("--store %q: expected memory or bolt:PATH", spec)
	}
}
