package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/kubectl/pkg/polymorphichelpers"
	"k8s.io/kubectl/pkg/scheme"
)

// Workload is a Deployment, StatefulSet or DaemonSet named as kubectl
// names it (deploy/a, sts/b), resolved through the API server's discovery.
type Workload struct {
	Ref     string // as given
	Name    string
	Mapping *meta.RESTMapping
}

// String is kind/name in kubectl's lower-case form, e.g. deployment/a.
func (w Workload) String() string {
	return strings.ToLower(w.Mapping.GroupVersionKind.Kind) + "/" + w.Name
}

// Resolve maps TYPE/NAME references to workloads, short names included.
func (c *Cluster) Resolve(refs []string) ([]Workload, error) {
	var out []Workload
	for _, ref := range refs {
		typ, name, _ := strings.Cut(ref, "/")
		gvr, err := c.mapper.ResourceFor(schema.ParseGroupResource(typ).WithVersion(""))
		if err != nil {
			return nil, fmt.Errorf("--restart %s: %w", ref, err)
		}
		gvk, err := c.mapper.KindFor(gvr)
		if err != nil {
			return nil, fmt.Errorf("--restart %s: %w", ref, err)
		}
		m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("--restart %s: %w", ref, err)
		}
		if _, err := polymorphichelpers.StatusViewerFor(gvk.GroupKind()); err != nil {
			return nil, fmt.Errorf("--restart %s: a %s has no rollout to restart and wait for (deployments, statefulsets and daemonsets have)", ref, gvk.Kind)
		}
		out = append(out, Workload{Ref: ref, Name: name, Mapping: m})
	}
	return out, nil
}

func (c *Cluster) get(ctx context.Context, namespace string, w Workload) (*unstructured.Unstructured, error) {
	u, err := c.dynamic.Resource(w.Mapping.Resource).Namespace(namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError("get", w.Mapping.Resource.Resource+"/"+w.Name, namespace, err)
	}
	return u, nil
}

// RestartPatch is what `kubectl rollout restart` would send to w now:
// the strategic merge patch that sets the pod template's RestartedAt,
// and the value it sets. A paused Deployment is refused, as kubectl
// refuses it.
func (c *Cluster) RestartPatch(ctx context.Context, namespace string, w Workload) (patch []byte, at string, err error) {
	u, err := c.get(ctx, namespace, w)
	if err != nil {
		return nil, "", err
	}
	obj, err := scheme.Scheme.New(w.Mapping.GroupVersionKind)
	if err != nil {
		return nil, "", err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, "", err
	}
	before, err := runtime.Encode(scheme.Codecs.LegacyCodec(w.Mapping.GroupVersionKind.GroupVersion()), obj)
	if err != nil {
		return nil, "", err
	}
	after, err := polymorphichelpers.ObjectRestarterFn(obj)
	if err != nil {
		return nil, "", fmt.Errorf("restart %s: %w", w, err)
	}
	if patch, err = strategicpatch.CreateTwoWayMergePatch(before, after, obj); err != nil {
		return nil, "", err
	}
	var restarted map[string]any
	if err := json.Unmarshal(after, &restarted); err != nil {
		return nil, "", err
	}
	at, _, _ = unstructured.NestedString(restarted, "spec", "template", "metadata", "annotations", RestartedAt)
	return patch, at, nil
}

// RestartedAt is the value of the pod template's RestartedAt now.
func (c *Cluster) RestartedAt(ctx context.Context, namespace string, w Workload) (string, error) {
	u, err := c.get(ctx, namespace, w)
	if err != nil {
		return "", err
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", RestartedAt)
	return v, nil
}

// Restart sends a patch RestartPatch made, which sets RestartedAt to at.
func (c *Cluster) Restart(ctx context.Context, namespace string, w Workload, patch []byte, at string, dry DryRun) (Change, error) {
	ch := Change{Kind: w.Mapping.GroupVersionKind.Kind, Name: w.Name, Namespace: namespace,
		What:      fmt.Sprintf("restart as kubectl rollout restart does (%s %s)", RestartedAt, at),
		PatchType: string(types.StrategicMergePatchType), Patch: patch}
	if dry == DryRunClient {
		return ch, nil
	}
	got, err := c.dynamic.Resource(w.Mapping.Resource).Namespace(namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{DryRun: dry.options()})
	if err != nil {
		return ch, apiError("patch", w.Mapping.Resource.Resource+"/"+w.Name, namespace, err)
	}
	if dry == DryRunServer {
		at, _, _ := unstructured.NestedString(got.Object, "spec", "template", "metadata", "annotations", RestartedAt)
		ch.Server, _ = json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{RestartedAt: at}}}}})
	}
	return ch, nil
}

// RolloutStatus says where w's rollout is, as `kubectl rollout status`
// decides it (observedGeneration, updated, available replicas).
func (c *Cluster) RolloutStatus(ctx context.Context, namespace string, w Workload) (string, bool, error) {
	u, err := c.get(ctx, namespace, w)
	if err != nil {
		return "", false, err
	}
	viewer, err := polymorphichelpers.StatusViewerFor(w.Mapping.GroupVersionKind.GroupKind())
	if err != nil {
		return "", false, err
	}
	msg, done, err := viewer.Status(u, 0)
	return strings.TrimSpace(msg), done, err
}

// ErrRolloutTimeout is a rollout not done within its timeout.
var ErrRolloutTimeout = errors.New("rollout not complete")

// WaitRollout polls w's rollout until it is done, fails, or timeout
// passes (ErrRolloutTimeout, with where it stood); status hears each new
// message.
func (c *Cluster) WaitRollout(ctx context.Context, namespace string, w Workload, timeout, poll time.Duration, status func(string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		msg, done, err := c.RolloutStatus(ctx, namespace, w)
		if ctx.Err() != nil {
			err = nil // the deadline's own: the timeout below says it
		}
		switch {
		case err != nil && !nearDeadline(ctx):
			return fmt.Errorf("rollout of %s: %w", w, err)
		case done:
			if status != nil {
				status(msg)
			}
			return nil
		case msg != last && msg != "":
			last = msg
			if status != nil {
				status(msg)
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				where := last
				if err != nil {
					if where != "" {
						where += "; "
					}
					where += "the last status poll failed: " + err.Error()
				}
				return fmt.Errorf("%w: %s within %v: %s (%w)", ErrRolloutTimeout, w, timeout, where, context.DeadlineExceeded)
			}
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// nearDeadline: ctx's deadline is under a second away. client-go's rate
// limiter refuses a request whose turn would come after the deadline,
// before the deadline passes, and its error is not DeadlineExceeded: a
// status poll that fails that close to the timeout is the timeout.
func nearDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < time.Second
}
