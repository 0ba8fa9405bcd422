package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// configObject is a ConfigMap or a Secret as far as a rewrite of one key
// goes. A Secret's values are shown to no one: its patches are printed
// masked.
type configObject struct {
	kind, name, namespace string
	resourceVersion       string
	data                  map[string]string
	annotations           map[string]string
}

func (c *Cluster) getConfig(ctx context.Context, namespace, kind, name string) (configObject, error) {
	o := configObject{kind: kind, name: name, namespace: namespace, data: map[string]string{}}
	switch kind {
	case "secret":
		s, err := c.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return o, apiError("get", "secrets/"+name, namespace, err)
		}
		for k, v := range s.Data {
			o.data[k] = string(v)
		}
		for k, v := range s.StringData {
			o.data[k] = v
		}
		o.resourceVersion, o.annotations = s.ResourceVersion, s.Annotations
	default:
		cm, err := c.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return o, apiError("get", "configmaps/"+name, namespace, err)
		}
		maps.Copy(o.data, cm.Data)
		o.resourceVersion, o.annotations = cm.ResourceVersion, cm.Annotations
	}
	return o, nil
}

// previous reads the values a rewrite recorded.
func (o configObject) previous() (map[string]string, error) {
	prev := map[string]string{}
	if s, ok := o.annotations[AnnotationPreviousValues]; ok {
		if err := json.Unmarshal([]byte(s), &prev); err != nil {
			return nil, refusef("%s %s: its %s annotation is not a map of values: %v", o.kind, o.name, AnnotationPreviousValues, err)
		}
	}
	return prev, nil
}

func (o configObject) show(v string) string {
	if o.kind == "secret" {
		return "***"
	}
	return v
}

// configChange reads the ConfigMap or Secret and the values a rewrite
// recorded on it, and lets change decide what to write; a conflict on the
// write is retried from a fresh read, with the change made anew.
func (c *Cluster) configChange(ctx context.Context, namespace, kind, name string,
	change func(ch *Change, o configObject, prev map[string]string) error) (Change, error) {
	var ch Change
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ch = Change{Kind: kindName(kind), Name: name, Namespace: namespace}
		o, err := c.getConfig(ctx, namespace, kind, name)
		if err != nil {
			return err
		}
		prev, err := o.previous()
		if err != nil {
			return err
		}
		return change(&ch, o, prev)
	})
	return ch, err
}

// RewriteValue sets key of the ConfigMap or Secret (kind "configmap" or
// "secret") to value, recording the old value in
// AnnotationPreviousValues. A key that is not there is an error (a typo
// would otherwise add a key nothing reads); a value already set is left
// alone; a recorded key whose value someone changed since is refused.
func (c *Cluster) RewriteValue(ctx context.Context, namespace, kind, name, key, value string, dry DryRun) (Change, error) {
	return c.configChange(ctx, namespace, kind, name, func(ch *Change, o configObject, prev map[string]string) error {
		cur, ok := o.data[key]
		if !ok {
			return fmt.Errorf("%s %s has no key %s (keys: %s)", kind, name, key, strings.Join(slices.Sorted(maps.Keys(o.data)), ", "))
		}
		was, recorded := prev[key]
		switch {
		case cur == value:
			ch.What = fmt.Sprintf("%s is %s already: nothing to rewrite", key, o.show(value))
			return nil
		case recorded:
			return refusef("%s %s: %s is %s, but %s says a cutover rewrote it from %s and was not rolled back: someone changed it since",
				kind, name, key, o.show(cur), AnnotationPreviousValues, o.show(was))
		}
		prev[key] = cur
		ch.What = fmt.Sprintf("%s %s → %s; the old value kept in %s", key, o.show(cur), o.show(value), AnnotationPreviousValues)
		return c.patchConfig(ctx, o, ch, key, value, prev, dry)
	})
}

// RestoreValue gives key back the value a rewrite recorded and removes
// the record; refused when the key no longer holds what the rewrite set.
func (c *Cluster) RestoreValue(ctx context.Context, namespace, kind, name, key, rewritten string, dry DryRun) (Change, error) {
	return c.configChange(ctx, namespace, kind, name, func(ch *Change, o configObject, prev map[string]string) error {
		was, recorded := prev[key]
		cur := o.data[key]
		switch {
		case !recorded:
			ch.What = fmt.Sprintf("%s is %s, no rewrite recorded: nothing to restore", key, o.show(cur))
			return nil
		case cur != rewritten:
			return refusef("%s %s: %s is %s, not %s as the cutover left it: someone changed it since; restore it by hand",
				kind, name, key, o.show(cur), o.show(rewritten))
		}
		delete(prev, key)
		ch.What = fmt.Sprintf("%s %s → %s, as it was before the cutover", key, o.show(cur), o.show(was))
		return c.patchConfig(ctx, o, ch, key, was, prev, dry)
	})
}

func kindName(kind string) string {
	if kind == "secret" {
		return "Secret"
	}
	return "ConfigMap"
}

// patchConfig sends a JSON merge patch of one key and the record of
// previous values (removed when empty), conditional on the
// resourceVersion read.
func (c *Cluster) patchConfig(ctx context.Context, o configObject, ch *Change, key, value string, prev map[string]string, dry DryRun) error {
	record := any(nil)
	if len(prev) > 0 {
		b, _ := json.Marshal(prev)
		record = string(b)
	}
	body := func(value any, record any) []byte {
		b, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": o.resourceVersion, "annotations": map[string]any{AnnotationPreviousValues: record}},
			"data":     map[string]any{key: value},
		})
		return b
	}
	var patch []byte
	ch.PatchType = string(types.MergePatchType)
	if o.kind == "secret" {
		patch = body([]byte(value), record) // []byte marshals as base64, as Secret data is
		masked := any(nil)
		if record != nil {
			masked = "***"
		}
		ch.Patch = body("***", masked)
	} else {
		patch = body(value, record)
		ch.Patch = patch
	}
	if dry == DryRunClient {
		return nil
	}
	opts := metav1.PatchOptions{DryRun: dry.options()}
	if o.kind == "secret" {
		got, err := c.client.CoreV1().Secrets(o.namespace).Patch(ctx, o.name, types.MergePatchType, patch, opts)
		if err != nil {
			return apiError("patch", "secrets/"+o.name, o.namespace, err)
		}
		if dry == DryRunServer {
			ch.Server, _ = json.Marshal(map[string]any{"data": map[string]string{key: "***"}, "annotations": maskedAnnotations(got.Annotations)})
		}
		return nil
	}
	got, err := c.client.CoreV1().ConfigMaps(o.namespace).Patch(ctx, o.name, types.MergePatchType, patch, opts)
	if err != nil {
		return apiError("patch", "configmaps/"+o.name, o.namespace, err)
	}
	if dry == DryRunServer {
		ch.Server, _ = json.Marshal(map[string]any{"data": map[string]string{key: got.Data[key]}, "annotations": got.Annotations})
	}
	return nil
}

// maskedAnnotations hides the previous values a Secret's annotation holds.
func maskedAnnotations(a map[string]string) map[string]string {
	out := maps.Clone(a)
	if _, ok := out[AnnotationPreviousValues]; ok {
		out[AnnotationPreviousValues] = "***"
	}
	return out
}
