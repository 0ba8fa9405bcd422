package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardctl/shardctl/internal/proctest"
)

// BenchmarkEtcdPuts is the ceiling of a registry over three embedded
// members on this machine: etcd alone, three members in one process on
// the same cores, taking transactions of 50 puts of an instance's size
// (700 bytes) from 4 clients at once, as replicas' group commits do. A
// registration costs one such put, so no replica writes faster; the
// figure is puts/s.
//
//	go test -run '^$' -bench EtcdPuts -benchtime 2000x ./internal/registry/store/
func BenchmarkEtcdPuts(b *testing.B) {
	ids := []string{"a", "b", "c"}
	var cluster []string
	for _, id := range ids {
		cluster = append(cluster, fmt.Sprintf("%s=http://127.0.0.1:%d", id, proctest.FreePort(b)))
	}
	var clients []*clientv3.Client
	for _, id := range ids {
		m, err := StartEmbeddedEtcd(EmbeddedEtcd{Dir: b.TempDir(), Name: id, ClientURL: "http://127.0.0.1:0", InitialCluster: strings.Join(cluster, ",")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(m.Close)
		st, err := OpenEtcdStore([]string{m.ClientURL}, "", EtcdLogin{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		clients = append(clients, st.(*Etcd).Client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, c := range clients {
		for _, err := c.Put(ctx, "/warm", "x"); err != nil; _, err = c.Put(ctx, "/warm", "x") {
			time.Sleep(100 * time.Millisecond)
		}
	}
	const puts, writers = 50, 4
	value := strings.Repeat("v", 700)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			c := clients[w%len(clients)]
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				ops := make([]clientv3.Op, puts)
				for j := range ops {
					ops[j] = clientv3.OpPut(fmt.Sprintf("/bench/%d/%d", i, j), value)
				}
				if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*puts)/time.Since(start).Seconds(), "puts/s")
}
