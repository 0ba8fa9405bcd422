package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Etcd is the store of `--store etcd:URL[,URL]`, shared by every
// replica of a registry. It is not written through the committer: a
// replica turns each batch into a guarded transaction (replica.go) and
// learns every change, its own included, from its watch.
//
// Keys, under the prefix:
//
//	instances/APP/ID   an instance (storedInstance JSON)
//	overrides/APP/ID   an operator's override
//	slots/APP          the shard slots of an app, {"ID": slot}, one key so
//	                   that one compare guards their uniqueness
//	ledger/SEQ         a deployment, SEQ zero-padded to sort
//	cutovers/NAME      a cutover record
//	members/ID         a live replica, under its session's lease
//	renewals/ID        the leases a replica renewed lately (its digest)
//	election/…         the coordinator election (concurrency.Election)
//	config/coordinators the replicas preferred as coordinator, "ID,ID"
type Etcd struct {
	Client *clientv3.Client
	Prefix string
}

// DefaultEtcdPrefix is where a registry keeps its keys in etcd.
const DefaultEtcdPrefix = "/shardctl/registry/"

// etcd key spaces under the prefix.
const (
	KeyInstances    = "instances/"
	KeyOverrides    = "overrides/"
	KeySlots        = "slots/"
	KeyLedger       = "ledger/"
	KeyCutovers     = "cutovers/"
	KeyMembers      = "members/"
	KeyRenewals     = "renewals/"
	KeyElection     = "election/"
	KeyCoordinators = "config/coordinators"
)

// EtcdTimeout bounds one request to etcd: past it the replica treats etcd
// as unreachable for that request.
const EtcdTimeout = 5 * time.Second

// EtcdLogin is how the registry reaches an etcd that wants TLS or a user:
// the CA its certificate is checked against, the client certificate it
// asks for (read again when its files change), and a user whose password
// is in a file. The zero EtcdLogin is plain text, no user.
type EtcdLogin struct {
	CAFile, CertFile, KeyFile string
	Username, PasswordFile    string
}

// config is what clientv3 dials with: TLS when a file is named, the
// user's credentials when one is (clientv3 logs in again by itself when
// its token expires).
func (l EtcdLogin) config(c *clientv3.Config) error {
	if l.CAFile != "" || l.CertFile != "" {
		tc, err := certs.ClientConfig(l.CAFile, l.CertFile, l.KeyFile)
		if err != nil {
			return fmt.Errorf("etcd TLS: %w", err)
		}
		c.TLS = tc
	}
	if (l.Username == "") != (l.PasswordFile == "") {
		return fmt.Errorf("an etcd user needs its password file, and a password file its user")
	}
	if l.Username != "" {
		pw, err := credential.WatchFile(l.PasswordFile)
		if err != nil {
			return fmt.Errorf("etcd password: %w", err)
		}
		c.Username = l.Username
		if c.Password, err = pw.Read(); err != nil {
			return fmt.Errorf("etcd password: %w", err)
		}
	}
	return nil
}

// tlsRefusal says why etcd refused a TLS connection, which gRPC reports
// as a timeout only ("" when it did not, or TLS is off): a handshake of
// its own, and a read, since TLS 1.3 refuses a client certificate after
// the handshake.
func tlsRefusal(endpoint string, tc *tls.Config) string {
	if tc == nil {
		return ""
	}
	addr := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		addr = u.Host
	}
	c := tc.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(addr)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, c)
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		return ""
	}
	return " (TLS: " + err.Error() + ")"
}

// OpenEtcdStore connects to etcd; it does not wait for it to answer, so a
// registry starts while its etcd does.
func OpenEtcdStore(endpoints []string, prefix string, login EtcdLogin) (Store, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("--store etcd:URL[,URL] needs at least one etcd endpoint")
	}
	for _, e := range endpoints {
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") && !strings.Contains(e, ":") {
			return nil, fmt.Errorf("etcd endpoint %q: want URL or HOST:PORT", e)
		}
	}
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	cfg := clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          EtcdTimeout,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	}
	if err := login.config(&cfg); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w%s", strings.Join(endpoints, ","), err, tlsRefusal(endpoints[0], cfg.TLS))
	}
	return &Etcd{Client: cli, Prefix: prefix}, nil
}

func (s *Etcd) Close() error { return s.Client.Close() }

// errReplicated: an etcd store is read by its replica's watch and written
// by its guarded transactions (replica.go), never through Load and Apply.
var errReplicated = errors.New("etcd store: read and written by its replica, not as a plain store")

func (s *Etcd) Load() (*State, error) { return nil, errReplicated }
func (s *Etcd) Apply(...Batch) error  { return errReplicated }

// GetAll reads every key under the prefix at one revision.
func (s *Etcd) GetAll(ctx context.Context) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, EtcdTimeout)
	defer cancel()
	resp, err := s.Client.Get(ctx, s.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: read %s: %w", s.Prefix, err)
	}
	return resp, nil
}

func (b *Batch) Empty() bool {
	return len(b.Put) == 0 && len(b.Delete) == 0 && len(b.Overrides) == 0 && len(b.Slots) == 0 &&
		len(b.Deployments) == 0 && len(b.Cutovers) == 0
}

// IsStateKey says whether a key holds registry state (what writes guard
// on), not a replica's own keys.
func IsStateKey(k string) bool {
	for _, p := range []string{KeyInstances, KeyOverrides, KeySlots, KeyLedger, KeyCutovers} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// AppSlots is the value of slots/APP.
type AppSlots struct {
	App string
	IDs map[string]int
}

// DecodeKV adds what one stored key holds to a batch; a key of slots
// comes back whole, for the caller to set against what it knows. Keys
// that are not registry state (members, renewals, election) add nothing.
func DecodeKV(k string, v []byte, b *Batch) (*AppSlots, error) {
	bad := func(err error) error { return fmt.Errorf("etcd: key %q: %w", k, err) }
	switch {
	case strings.HasPrefix(k, KeyInstances):
		// Every replica reads every instance written through any: with
		// goccy/go-json, at a quarter of encoding/json's cost, the same
		// values.
		var in storedInstance
		if err := gojson.Unmarshal(v, &in); err != nil {
			return nil, bad(err)
		}
		b.Put = append(b.Put, (*registryapi.Instance)(&in))
	case strings.HasPrefix(k, KeyOverrides):
		ref, ok := SplitKeyRef(k[len(KeyOverrides):])
		var o registryapi.Override
		if err := json.Unmarshal(v, &o); err != nil || !ok {
			return nil, bad(fmt.Errorf("malformed override"))
		}
		b.SetOverride(ref, o)
	case strings.HasPrefix(k, KeySlots):
		s := &AppSlots{App: k[len(KeySlots):]}
		if err := json.Unmarshal(v, &s.IDs); err != nil {
			return nil, bad(err)
		}
		return s, nil
	case strings.HasPrefix(k, KeyLedger):
		var d ledger.Deployment
		if err := json.Unmarshal(v, &d); err != nil {
			return nil, bad(err)
		}
		b.Deployments = append(b.Deployments, d)
	case strings.HasPrefix(k, KeyCutovers):
		var c registryapi.Cutover
		if err := json.Unmarshal(v, &c); err != nil {
			return nil, bad(err)
		}
		b.Cutovers = append(b.Cutovers, c)
	}
	return nil, nil
}

// Add adds what another batch puts, deletes and stores to b.
func (b *Batch) Add(o *Batch) {
	b.Put = append(b.Put, o.Put...)
	b.Delete = append(b.Delete, o.Delete...)
	for ref, ov := range o.Overrides {
		b.SetOverride(ref, ov)
	}
	for ref, n := range o.Slots {
		if b.Slots == nil {
			b.Slots = map[registryapi.InstanceRef]int{}
		}
		b.Slots[ref] = n
	}
	b.Deployments = append(b.Deployments, o.Deployments...)
	b.Cutovers = append(b.Cutovers, o.Cutovers...)
}

func (b *Batch) SetOverride(ref registryapi.InstanceRef, o registryapi.Override) {
	if b.Overrides == nil {
		b.Overrides = map[registryapi.InstanceRef]registryapi.Override{}
	}
	b.Overrides[ref] = o
}

// SplitKeyRef reads "APP/ID": an app has no slash, an id may.
func SplitKeyRef(s string) (registryapi.InstanceRef, bool) {
	app, id, ok := strings.Cut(s, "/")
	return registryapi.InstanceRef{App: app, ID: id}, ok && app != "" && id != ""
}

func instanceKey(ref registryapi.InstanceRef) string { return KeyInstances + ref.App + "/" + ref.ID }
func overrideKey(ref registryapi.InstanceRef) string { return KeyOverrides + ref.App + "/" + ref.ID }
func ledgerKey(seq int) string                       { return KeyLedger + fmt.Sprintf("%010d", seq) }

// Txn turns a batch into etcd operations, and names the state key of
// each (what the write's guards compare). slotsOf gives the slots an app
// will have after the batch: the whole slots/APP value.
func (s *Etcd) Txn(b *Batch, slotsOf func(app string) map[string]int) (ops []clientv3.Op, keys []string, err error) {
	put := func(k string, v any) {
		enc, merr := json.Marshal(v)
		if merr != nil && err == nil {
			err = merr
		}
		ops, keys = append(ops, clientv3.OpPut(s.Prefix+k, string(enc))), append(keys, k)
	}
	del := func(k string) {
		ops, keys = append(ops, clientv3.OpDelete(s.Prefix+k)), append(keys, k)
	}
	for _, in := range b.Put {
		put(instanceKey(registryapi.InstanceRef{App: in.App, ID: in.InstanceID}), (*storedInstance)(in))
	}
	for _, ref := range b.Delete {
		del(instanceKey(ref))
	}
	for ref, o := range b.Overrides {
		if o.Zero() {
			del(overrideKey(ref))
		} else {
			put(overrideKey(ref), o)
		}
	}
	for _, app := range slotApps(b) {
		if ids := slotsOf(app); len(ids) == 0 {
			del(KeySlots + app)
		} else {
			put(KeySlots+app, ids)
		}
	}
	for _, d := range b.Deployments {
		put(ledgerKey(d.Seq), d)
	}
	for _, c := range b.Cutovers {
		put(KeyCutovers+c.Name, c)
	}
	return ops, keys, err
}

func slotApps(b *Batch) []string {
	var apps []string
	for ref := range b.Slots {
		if !slices.Contains(apps, ref.App) {
			apps = append(apps, ref.App)
		}
	}
	slices.Sort(apps)
	return apps
}

// ParseCoordinators reads the value of config/coordinators.
func ParseCoordinators(v string) []string {
	var ids []string
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
