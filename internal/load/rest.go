package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"time"
)

// REST is a Client over Camunda 8.8's REST API at base (http://HOST:PORT,
// with or without /v2), as Camunda's REST clients use it: JSON bodies,
// keys as strings, job activation by long poll.
func REST(base string, hc *http.Client) Client {
	base = strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/v2")
	return &restClient{base: base + "/v2", hc: hc}
}

type restClient struct {
	base string
	hc   *http.Client
}

// problem is an RFC 9457 problem detail, as the REST API answers errors.
type problem struct {
	Title, Detail string
	Status        int
}

// restError reads a failed answer into an error that names the endpoint,
// the status and the problem; backpressure wraps ErrRefused.
func restError(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p problem
	if json.Unmarshal(b, &p) != nil || p.Title == "" {
		p.Title, p.Detail = resp.Status, strings.TrimSpace(string(b))
	}
	err := fmt.Errorf("%s: %d %s: %s", what, resp.StatusCode, p.Title, p.Detail)
	if resp.StatusCode == http.StatusServiceUnavailable && p.Title == "RESOURCE_EXHAUSTED" {
		return errors.Join(ErrRefused, err)
	}
	return err
}

// post sends a JSON body and decodes a JSON answer into out (nil: none
// expected).
func (r *restClient) post(ctx context.Context, path string, body any, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return r.do(ctx, path, "application/json", bytes.NewReader(b), out)
}

func (r *restClient) do(ctx context.Context, path, contentType string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := r.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return restError("POST "+path, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func (r *restClient) Deploy(ctx context.Context, name string, bpmn []byte) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="resources"; filename=%q`, name))
	h.Set("Content-Type", "application/xml")
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := part.Write(bpmn); err != nil {
		return err
	}
	if err := mw.Close(); err != nil {
		return err
	}
	return r.do(ctx, "/deployments", mw.FormDataContentType(), &body, nil)
}

func (r *restClient) Create(ctx context.Context, processID string) (int64, error) {
	var out struct{ ProcessInstanceKey string }
	if err := r.post(ctx, "/process-instances", map[string]string{"processDefinitionId": processID}, &out); err != nil {
		return 0, err
	}
	return strconv.ParseInt(out.ProcessInstanceKey, 10, 64)
}

// restJobTimeout is how long an activated job is this worker's: the Go
// client's default, 5 minutes.
const restJobTimeout = 5 * time.Minute

// restPoll is how long one activation waits for jobs.
const restPoll = 2 * time.Second

// Work polls for jobs as Camunda's REST job workers do: one activation
// at a time, for as many jobs as it has room for, long-polling when
// there are none, and backing off after a failed poll.
func (r *restClient) Work(ctx context.Context, w Worker, done func(int64)) {
	slots := make(chan struct{}, w.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		// Wait for room for at least one job, then ask for all there is.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		room := 1
		for room < w.Concurrency {
			select {
			case slots <- struct{}{}:
				room++
				continue
			default:
			}
			break
		}
		var out struct {
			Jobs []struct{ JobKey, ProcessInstanceKey string }
		}
		err := r.post(ctx, "/jobs/activation", map[string]any{"type": w.JobType, "worker": "shardctl-load",
			"timeout": restJobTimeout.Milliseconds(), "maxJobsToActivate": room, "requestTimeout": restPoll.Milliseconds()}, &out)
		for range max(room-len(out.Jobs), 0) {
			<-slots
		}
		if err != nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		for i, j := range out.Jobs {
			wg.Go(func() {
				if i < room { // a gateway never sends more than asked; if one did, those hold no slot
					defer func() { <-slots }()
				}
				cctx, cancel := context.WithTimeout(ctx, w.Timeout)
				defer cancel()
				if r.post(cctx, "/jobs/"+j.JobKey+"/completion", map[string]any{}, nil) == nil {
					if k, err := strconv.ParseInt(j.ProcessInstanceKey, 10, 64); err == nil {
						done(k)
					}
				}
			})
		}
	}
}
