package drain

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/search"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// waitingShown is how many of a stuck shard's running instances a drain
// names.
const waitingShown = 10

// searchTimeout bounds the searches that name them.
const searchTimeout = 5 * time.Second

// Waiting is a process instance a stuck shard still runs, as the shard's
// REST API (/v2) reports it.
type Waiting struct {
	// Key is the instance's key as clients of the proxy know it (with the
	// shard's slot).
	Key       string    `json:"processInstanceKey"`
	ProcessID string    `json:"processDefinitionId"`
	Started   time.Time `json:"startDate"`
	// Elements are the ids of the elements it waits in.
	Elements []string `json:"elements"`
}

// waiting reads the instances a shard still runs, oldest first, and where
// each waits: total is how many there are in all, asked with the
// credential its metadata names (shards). A shard registered without a
// REST address (registryapi.MetaREST) is not asked: ok false.
func waiting(ctx context.Context, shards *shardconn.Access, shard registryapi.Shard) (list []Waiting, total int64, ok bool, err error) {
	base := shard.Metadata[registryapi.MetaREST]
	if base == "" {
		return nil, 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	t, err := shards.Target(shard.ID, shard.Address, shard.Metadata[registryapi.MetaTLS], shard.Metadata[registryapi.MetaCredential])
	if err != nil {
		return nil, 0, true, err
	}
	auth, err := t.Authorization(ctx)
	if err != nil {
		return nil, 0, true, err
	}
	g := search.Remote{Base: base, Auth: auth, Client: shards.RESTClient()}
	pi := search.ProcessInstances
	q, err := search.Parse(pi, fmt.Appendf(nil, `{"filter":{"state":"ACTIVE"},"sort":[{"field":"startDate"}],"page":{"limit":%d}}`, waitingShown))
	if err != nil {
		return nil, 0, true, err
	}
	instances, err := g.Search(ctx, pi, q)
	if err != nil || len(instances.Items) == 0 {
		return nil, instances.Total, true, err
	}
	keys := make([]string, len(instances.Items))
	for i, it := range instances.Items {
		keys[i] = strconv.Quote(strconv.FormatInt(it.Get(pi, "processInstanceKey").N, 10))
	}
	el := search.ElementInstances
	q, err = search.Parse(el, fmt.Appendf(nil, `{"filter":{"state":"ACTIVE","processInstanceKey":{"$in":[%s]}},"page":{"limit":1000}}`, strings.Join(keys, ",")))
	if err != nil {
		return nil, 0, true, err
	}
	elements, err := g.Search(ctx, el, q)
	if err != nil {
		return nil, instances.Total, true, err
	}
	at := map[int64][]string{}
	for _, it := range elements.Items {
		k := it.Get(el, "processInstanceKey").N
		at[k] = append(at[k], it.Get(el, "elementId").S)
	}
	for _, it := range instances.Items {
		k := it.Get(pi, "processInstanceKey").N
		list = append(list, Waiting{
			Key:       strconv.FormatInt(keyslot.With(k, shard.Slot), 10),
			ProcessID: it.Get(pi, "processDefinitionId").S,
			Started:   time.UnixMilli(it.Get(pi, "startDate").N).UTC(),
			Elements:  at[k],
		})
	}
	return list, instances.Total, true, nil
}

// waitingLine says which instances a stuck shard still runs.
func waitingLine(list []Waiting, total int64) string {
	var b strings.Builder
	b.WriteString(human.Plural(float64(total), "instance") + " still running")
	if int64(len(list)) < total {
		fmt.Fprintf(&b, ", the %d oldest", len(list))
	}
	b.WriteString(": ")
	for i, w := range list {
		if i > 0 {
			b.WriteString(", ")
		}
		where := "no element active"
		if len(w.Elements) > 0 {
			where = "waiting in " + strings.Join(w.Elements, ", ")
		}
		fmt.Fprintf(&b, "%s (%s, %s)", w.Key, w.ProcessID, where)
	}
	return b.String()
}
