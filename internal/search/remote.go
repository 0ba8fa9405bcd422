package search

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// MaxAnswer bounds a gateway's answer to a search or a get.
const MaxAnswer = 64 << 20

// Remote is one gateway's REST API, asked for searches and gets by key:
// a shard, as the proxy and drain ask it.
type Remote struct {
	Client *http.Client // nil: http.DefaultClient
	// Base is the API's base URL (/v2 below it).
	Base string
	// Auth is the Authorization header to send; Tenant a physical
	// tenant (8.10's /physical-tenants/{id} prefix); "" for none.
	Auth, Tenant string
}

// Search asks the gateway q; its keys are the gateway's.
func (g Remote) Search(ctx context.Context, r *Resource, q Query) (Result, error) {
	body, err := g.call(ctx, http.MethodPost, "/v2/"+r.Path+"/search", q.AppendJSON(r, nil))
	if err != nil {
		return Result{}, err
	}
	return DecodeResult(r, body)
}

// Get asks the gateway for the item of r with key.
func (g Remote) Get(ctx context.Context, r *Resource, key int64) (Item, error) {
	body, err := g.call(ctx, http.MethodGet, "/v2/"+r.Path+"/"+strconv.FormatInt(key, 10), nil)
	if err != nil {
		return Item{}, err
	}
	it, err := DecodeItem(r, body)
	if err != nil {
		return Item{}, errors.New("the answer does not read as an item: " + err.Error())
	}
	return it, nil
}

// call sends one request and returns a 200's body; a problem the
// gateway answers is an *Error with its status.
func (g Remote) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	if g.Tenant != "" {
		path = physicaltenant.PathPrefix + g.Tenant + path
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(g.Base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if g.Auth != "" {
		req.Header.Set("Authorization", g.Auth)
	}
	c := g.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the answer: %w", err)
	case len(b) > MaxAnswer:
		return nil, fmt.Errorf("the answer is larger than %d bytes", MaxAnswer)
	case resp.StatusCode == http.StatusOK:
		return b, nil
	}
	var p struct{ Title, Detail string }
	if json.Unmarshal(b, &p) != nil || p.Title == "" {
		p.Title, p.Detail = http.StatusText(resp.StatusCode), strings.TrimSpace(string(b))
	}
	return nil, &Error{Status: resp.StatusCode, Title: p.Title, Detail: p.Detail}
}
