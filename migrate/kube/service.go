package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Endpoints are how many pods a selector picks, and how many of them an
// EndpointSlice lists as ready.
type Endpoints struct {
	Pods, Ready int
}

// ReadyEndpoints counts the pods of namespace that selector picks and
// that some EndpointSlice lists ready: what a Service selecting them
// would send traffic to.
func (c *Cluster) ReadyEndpoints(ctx context.Context, namespace string, selector map[string]string) (Endpoints, error) {
	pods, err := c.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
	if err != nil {
		return Endpoints{}, apiError("list", "pods", namespace, err)
	}
	picked := map[string]bool{}
	for _, p := range pods.Items {
		picked[p.Name] = true
	}
	var e Endpoints
	e.Pods = len(picked)
	if e.Pods == 0 {
		return e, nil
	}
	eps, err := c.client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, apiError("list", "endpointslices.discovery.k8s.io", namespace, err)
	}
	ready := map[string]bool{}
	for _, s := range eps.Items {
		for _, ep := range s.Endpoints {
			ref := ep.TargetRef
			// An unset ready condition means ready, as the API defines it.
			if ref != nil && ref.Kind == "Pod" && picked[ref.Name] && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
				ready[ref.Name] = true
			}
		}
	}
	e.Ready = len(ready)
	return e, nil
}

// serviceChange reads the Service and lets change decide what to write
// (the selector a switch recorded, when there is one, in prev); a
// conflict on the write is retried from a fresh read, with the change
// made anew.
func (c *Cluster) serviceChange(ctx context.Context, namespace, name string,
	change func(ch *Change, svc *corev1.Service, prev string, recorded bool) error) (Change, error) {
	var ch Change
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ch = Change{Kind: "Service", Name: name, Namespace: namespace}
		svc, err := c.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return apiError("get", "services/"+name, namespace, err)
		}
		prev, recorded := svc.Annotations[AnnotationPreviousSelector]
		return change(&ch, svc, prev, recorded)
	})
	return ch, err
}

// SwitchService points the Service at the pods selector picks, recording
// the selector it had in AnnotationPreviousSelector. It is refused when
// none of those pods is ready, and when the annotation is there already
// while the Service selects something else (someone changed it since a
// switch that was never rolled back). A Service that already selects them
// is left alone.
func (c *Cluster) SwitchService(ctx context.Context, namespace, name string, selector map[string]string, dry DryRun) (Change, error) {
	return c.serviceChange(ctx, namespace, name, func(ch *Change, svc *corev1.Service, prev string, recorded bool) error {
		cur := svc.Spec.Selector
		switch {
		case maps.Equal(cur, selector):
			ch.What = fmt.Sprintf("already selects %s: nothing to switch", FormatSelector(selector))
			return nil
		case recorded:
			return refusef("service %s selects %s, but its %s annotation (%s) says a cutover switched it and was not rolled back: "+
				"someone changed it since; set the selector by hand and remove the annotation", name, FormatSelector(cur), AnnotationPreviousSelector, prev)
		}
		ep, err := c.ReadyEndpoints(ctx, namespace, selector)
		if err != nil {
			return err
		}
		if ep.Ready == 0 {
			return refusef("service %s would select no ready pod: %s picks %d pods, %d of them ready in an EndpointSlice", name, FormatSelector(selector), ep.Pods, ep.Ready)
		}
		was, _ := json.Marshal(cur)
		ch.What = fmt.Sprintf("selector %s → %s (%d of %d pods ready); the old one kept in %s", FormatSelector(cur), FormatSelector(selector), ep.Ready, ep.Pods, AnnotationPreviousSelector)
		return c.patchService(ctx, svc, ch, replaceSelector(cur, selector), map[string]any{AnnotationPreviousSelector: string(was)}, dry)
	})
}

// RestoreService gives the Service back the selector a switch recorded,
// and removes the record. It is refused when the Service no longer
// selects what the switch set (someone changed it since); with no record
// there is nothing to restore.
func (c *Cluster) RestoreService(ctx context.Context, namespace, name string, switched map[string]string, dry DryRun) (Change, error) {
	return c.serviceChange(ctx, namespace, name, func(ch *Change, svc *corev1.Service, prev string, recorded bool) error {
		cur := svc.Spec.Selector
		if !recorded {
			ch.What = fmt.Sprintf("selects %s, no switch recorded: nothing to restore", FormatSelector(cur))
			return nil
		}
		var was map[string]string
		if err := json.Unmarshal([]byte(prev), &was); err != nil {
			return refusef("service %s: its %s annotation %q is not a selector: %v", name, AnnotationPreviousSelector, prev, err)
		}
		if !maps.Equal(cur, switched) {
			return refusef("service %s selects %s, not %s as the cutover left it: someone changed it since; restore %s by hand",
				name, FormatSelector(cur), FormatSelector(switched), FormatSelector(was))
		}
		ch.What = fmt.Sprintf("selector %s → %s, as it was before the cutover", FormatSelector(cur), FormatSelector(was))
		return c.patchService(ctx, svc, ch, replaceSelector(cur, was), map[string]any{AnnotationPreviousSelector: nil}, dry)
	})
}

// testBeforePatch runs between a read and the patch made from it: a test
// writes the object there to meet a real conflict.
var testBeforePatch func()

// replaceSelector is the merge patch of a selector from cur to next: keys
// only cur has are removed (null), next's are set.
func replaceSelector(cur, next map[string]string) map[string]any {
	out := map[string]any{}
	for k := range cur {
		if _, ok := next[k]; !ok {
			out[k] = nil
		}
	}
	for k, v := range next {
		out[k] = v
	}
	return out
}

// patchService sends a JSON merge patch of the selector and annotations,
// conditional on the resourceVersion read: a write in between is a
// conflict, never overwritten.
func (c *Cluster) patchService(ctx context.Context, svc *corev1.Service, ch *Change, selector, annotations map[string]any, dry DryRun) error {
	if testBeforePatch != nil {
		testBeforePatch()
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion, "annotations": annotations},
		"spec":     map[string]any{"selector": selector},
	})
	ch.PatchType, ch.Patch = string(types.MergePatchType), patch
	if dry == DryRunClient {
		return nil
	}
	got, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: dry.options()})
	if err != nil {
		return apiError("patch", "services/"+svc.Name, svc.Namespace, err)
	}
	if dry == DryRunServer {
		ch.Server, _ = json.Marshal(map[string]any{"selector": got.Spec.Selector, "annotations": got.Annotations})
	}
	return nil
}

// Selector is the Service's selector now.
func (c *Cluster) Selector(ctx context.Context, namespace, name string) (map[string]string, error) {
	svc, err := c.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError("get", "services/"+name, namespace, err)
	}
	return svc.Spec.Selector, nil
}
