package kube

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// env is a namespace of the test cluster and a Cluster for user in it.
type env struct {
	ns         string
	admin      kubernetes.Interface
	kubeconfig string
	c          *Cluster
}

func newEnv(t *testing.T, user string) *env {
	t.Helper()
	kc := kubetest.Start(t)
	ns := kc.Namespace(t)
	kubeconfig := kc.Kubeconfig(t, user, ns)
	return &env{ns: ns, admin: kc.Client, kubeconfig: kubeconfig, c: clusterFor(t, kubeconfig)}
}

func clusterFor(t *testing.T, kubeconfig string) *Cluster {
	t.Helper()
	return clusterWith(t, kubeconfig, nil)
}

// clusterWith is a Cluster whose client config wrap changes (nil: as
// the kubeconfig says).
func clusterWith(t *testing.T, kubeconfig string, wrap func(*rest.Config) *rest.Config) *Cluster {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.WrapConfigFn = wrap
	c, err := New(flags)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	gateway = map[string]string{"app": "zeebe-gateway"}
	proxy   = map[string]string{"app.kubernetes.io/name": "shardctl-proxy"}
)

// service is the Service clients use, selecting the Zeebe gateway, with
// an annotation of its own.
func (e *env) service(t *testing.T) *corev1.Service {
	t.Helper()
	svc, err := e.admin.CoreV1().Services(e.ns).Create(budget.Context(t, 30*time.Second), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "zeebe", Annotations: map[string]string{"team": "payments"}},
		Spec:       corev1.ServiceSpec{Selector: gateway, Ports: []corev1.ServicePort{{Name: "gateway", Port: 26500}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// pods creates Pending pods with labels, and an EndpointSlice listing
// them, ready as said; no controller does either here.
func (e *env) pods(t *testing.T, labels map[string]string, ready ...bool) {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{GenerateName: "proxy-", Labels: map[string]string{discoveryv1.LabelServiceName: "shardctl-proxy"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	for i, r := range ready {
		pod, err := e.admin.CoreV1().Pods(e.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "proxy-", Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy", Image: "shardctl"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0." + string(rune('1'+i))},
			Conditions: discoveryv1.EndpointConditions{Ready: &r}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: e.ns}})
	}
	if _, err := e.admin.DiscoveryV1().EndpointSlices(e.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// identity is what a rollback must give back exactly: the selector and
// the annotations, as the API server serves them.
func identity(t *testing.T, svc *corev1.Service) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Selector    map[string]string
		Annotations map[string]string
	}{svc.Spec.Selector, svc.Annotations})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (e *env) getService(t *testing.T) *corev1.Service {
	t.Helper()
	svc, err := e.admin.CoreV1().Services(e.ns).Get(budget.Context(t, 30*time.Second), "zeebe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func TestSwitchAndRestoreService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, time.Minute)
	before := identity(t, e.service(t))

	// No pod behind the new selector, then only unready ones: refused,
	// nothing written.
	for _, ready := range [][]bool{nil, {false, false}} {
		if ready != nil {
			e.pods(t, proxy, ready...)
		}
		_, err := e.c.SwitchService(ctx, e.ns, "zeebe", proxy, DryRunNone)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no ready pod") {
			t.Fatalf("switch to %d unready pods: %v, want refused for want of a ready pod", len(ready), err)
		}
		if got := identity(t, e.getService(t)); got != before {
			t.Fatalf("a refused switch changed the Service: %s, was %s", got, before)
		}
	}
	e.pods(t, proxy, true)

	ch, err := e.c.SwitchService(ctx, e.ns, "zeebe", proxy, DryRunNone)
	if err != nil {
		t.Fatal(err)
	}
	svc := e.getService(t)
	if svc.Spec.Selector["app.kubernetes.io/name"] != "shardctl-proxy" || len(svc.Spec.Selector) != 1 ||
		svc.Annotations[AnnotationPreviousSelector] != `{"app":"zeebe-gateway"}` || svc.Annotations["team"] != "payments" {
		t.Fatalf("after the switch: selector %v, annotations %v", svc.Spec.Selector, svc.Annotations)
	}
	if !strings.Contains(ch.What, "1 of 3 pods ready") || ch.PatchType != string(types.MergePatchType) {
		t.Errorf("change %+v", ch)
	}
	// Again: nothing to do.
	if ch, err := e.c.SwitchService(ctx, e.ns, "zeebe", proxy, DryRunNone); err != nil || ch.Patch != nil {
		t.Errorf("a second switch: %+v, %v; want nothing sent", ch, err)
	}

	if _, err := e.c.RestoreService(ctx, e.ns, "zeebe", proxy, DryRunNone); err != nil {
		t.Fatal(err)
	}
	if got := identity(t, e.getService(t)); got != before {
		t.Errorf("after the rollback: %s\nbefore the switch:  %s", got, before)
	}
	if ch, err := e.c.RestoreService(ctx, e.ns, "zeebe", proxy, DryRunNone); err != nil || ch.Patch != nil {
		t.Errorf("a second restore: %+v, %v; want nothing sent", ch, err)
	}
}

// Someone writes the Service between shardctl's read and its patch: the
// patch meets a real conflict, is made again from a fresh read, and
// their change stays. Someone who changed the selector after a switch
// has their selector kept: the restore is refused.
func TestServiceConflictsAreNotOverwritten(t *testing.T) {
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, time.Minute)
	e.service(t)
	e.pods(t, proxy, true)
	writes := 0
	testBeforePatch = func() {
		if writes++; writes == 1 {
			_, err := e.admin.CoreV1().Services(e.ns).Patch(ctx, "zeebe", types.MergePatchType, []byte(`{"metadata":{"annotations":{"owner":"someone-else"}}}`), metav1.PatchOptions{})
			if err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { testBeforePatch = nil })
	if _, err := e.c.SwitchService(ctx, e.ns, "zeebe", proxy, DryRunNone); err != nil {
		t.Fatal(err)
	}
	svc := e.getService(t)
	if writes != 2 || svc.Annotations["owner"] != "someone-else" || svc.Spec.Selector["app.kubernetes.io/name"] != "shardctl-proxy" {
		t.Fatalf("after a conflict: %d attempts, annotations %v, selector %v; want 2, their annotation kept and the switch made", writes, svc.Annotations, svc.Spec.Selector)
	}
	testBeforePatch = nil

	if _, err := e.admin.CoreV1().Services(e.ns).Patch(ctx, "zeebe", types.MergePatchType, []byte(`{"spec":{"selector":{"app.kubernetes.io/name":"hand-picked"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.RestoreService(ctx, e.ns, "zeebe", proxy, DryRunNone)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "someone changed it since") {
		t.Fatalf("restore over a hand-made selector: %v, want refused", err)
	}
	if sel := e.getService(t).Spec.Selector; sel["app.kubernetes.io/name"] != "hand-picked" {
		t.Errorf("the refused restore changed the selector to %v", sel)
	}
}

func (e *env) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	replicas := int32(2)
	d, err := e.admin.AppsV1().Deployments(e.ns).Create(budget.Context(t, 30*time.Second), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// rolledOut sets a Deployment's status as its controller would once the
// rollout of its current generation is complete.
func (e *env) rolledOut(t *testing.T, name string) {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	d, err := e.admin.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	if _, err := e.admin.AppsV1().Deployments(e.ns).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRewriteRestartAndRollout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, 2*time.Minute)
	if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "zeebe-client"},
		Data: map[string]string{"ZEEBE_ADDRESS": "zeebe-gateway:26500", "OTHER": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.RewriteValue(ctx, e.ns, "configmap", "zeebe-client", "ZEEBE_ADDRES", "x", DryRunNone); err == nil || !strings.Contains(err.Error(), "no key ZEEBE_ADDRES (keys: OTHER, ZEEBE_ADDRESS)") {
		t.Errorf("a key not there: %v", err)
	}
	if _, err := e.c.RewriteValue(ctx, e.ns, "configmap", "zeebe-client", "ZEEBE_ADDRESS", "shardctl-proxy:26500", DryRunNone); err != nil {
		t.Fatal(err)
	}
	cm, _ := e.admin.CoreV1().ConfigMaps(e.ns).Get(ctx, "zeebe-client", metav1.GetOptions{})
	if cm.Data["ZEEBE_ADDRESS"] != "shardctl-proxy:26500" || cm.Annotations[AnnotationPreviousValues] != `{"ZEEBE_ADDRESS":"zeebe-gateway:26500"}` {
		t.Fatalf("after the rewrite: %v %v", cm.Data, cm.Annotations)
	}

	e.deployment(t, "workers")
	e.rolledOut(t, "workers")
	ws, err := e.c.Resolve([]string{"deploy/workers"})
	if err != nil {
		t.Fatal(err)
	}
	if ws[0].String() != "deployment/workers" {
		t.Errorf("deploy/workers resolved to %s", ws[0])
	}
	if _, err := e.c.Resolve([]string{"svc/zeebe"}); err == nil || !strings.Contains(err.Error(), "no rollout") {
		t.Errorf("a Service to restart: %v", err)
	}
	patch, at, err := e.c.RestartPatch(ctx, e.ns, ws[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, at); err != nil || !strings.Contains(string(patch), RestartedAt) {
		t.Fatalf("restart patch %s at %q", patch, at)
	}
	if _, err := e.c.Restart(ctx, e.ns, ws[0], patch, at, DryRunNone); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.RestartedAt(ctx, e.ns, ws[0]); got != at {
		t.Errorf("restartedAt %q, want %q", got, at)
	}
	// The new generation is not observed: the wait times out, saying so.
	err = e.c.WaitRollout(ctx, e.ns, ws[0], 2*time.Second, 200*time.Millisecond, nil)
	if !errors.Is(err, ErrRolloutTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "spec update to be observed") {
		t.Fatalf("an unobserved rollout: %v", err)
	}
	// A client whose rate limiter turns a poll away just before the
	// deadline (its turn would come after it) still times out. Its one
	// token goes to the first poll; every later one is turned away
	// without a request, so no slow API server can put one in flight at
	// the deadline.
	throttled := clusterWith(t, e.kubeconfig, func(c *rest.Config) *rest.Config {
		c.QPS, c.Burst = 0.2, 1
		return c
	})
	err = throttled.WaitRollout(ctx, e.ns, ws[0], 900*time.Millisecond, 100*time.Millisecond, nil)
	if !errors.Is(err, ErrRolloutTimeout) || !strings.Contains(err.Error(), "spec update to be observed") || !strings.Contains(err.Error(), "; the last status poll failed: ") {
		t.Fatalf("an unobserved rollout polled through a rate limiter: %v", err)
	}
	done := make(chan error, 1)
	var heard []string
	go func() {
		done <- e.c.WaitRollout(ctx, e.ns, ws[0], budget.Of(30*time.Second), 100*time.Millisecond, func(s string) { heard = append(heard, s) })
	}()
	time.Sleep(500 * time.Millisecond)
	e.rolledOut(t, "workers")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(heard) == 0 || !strings.Contains(heard[len(heard)-1], "successfully rolled out") {
		t.Errorf("heard %q", heard)
	}

	if _, err := e.c.RestoreValue(ctx, e.ns, "configmap", "zeebe-client", "ZEEBE_ADDRESS", "shardctl-proxy:26500", DryRunNone); err != nil {
		t.Fatal(err)
	}
	cm, _ = e.admin.CoreV1().ConfigMaps(e.ns).Get(ctx, "zeebe-client", metav1.GetOptions{})
	if cm.Data["ZEEBE_ADDRESS"] != "zeebe-gateway:26500" || len(cm.Annotations) != 0 {
		t.Errorf("after the restore: %v %v", cm.Data, cm.Annotations)
	}
}

// A Secret's values never show in a change, and are restored exactly.
func TestSecretValuesAreMasked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, time.Minute)
	if _, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "zeebe"},
		Data: map[string][]byte{"ZEEBE_ADDRESS": []byte("old-gateway:26500")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []DryRun{DryRunServer, DryRunNone} {
		ch, err := e.c.RewriteValue(ctx, e.ns, "secret", "zeebe", "ZEEBE_ADDRESS", "new-proxy:26500", dry)
		if err != nil {
			t.Fatal(err)
		}
		shown := ch.What + string(ch.Patch) + string(ch.Server)
		if strings.Contains(shown, "gateway") || strings.Contains(shown, "proxy") || !strings.Contains(shown, "***") {
			t.Errorf("%s: a Secret's values shown: %s", dry, shown)
		}
	}
	if _, err := e.c.RestoreValue(ctx, e.ns, "secret", "zeebe", "ZEEBE_ADDRESS", "new-proxy:26500", DryRunNone); err != nil {
		t.Fatal(err)
	}
	s, _ := e.admin.CoreV1().Secrets(e.ns).Get(ctx, "zeebe", metav1.GetOptions{})
	if string(s.Data["ZEEBE_ADDRESS"]) != "old-gateway:26500" || len(s.Annotations) != 0 {
		t.Errorf("after the restore: %q %v", s.Data["ZEEBE_ADDRESS"], s.Annotations)
	}
}

// A server-side dry run is checked by the API server and stores nothing.
func TestServerDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, time.Minute)
	svc := e.service(t)
	e.pods(t, proxy, true)
	e.deployment(t, "workers")
	ws, err := e.c.Resolve([]string{"deployment/workers"})
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := e.admin.AppsV1().Deployments(e.ns).Get(ctx, "workers", metav1.GetOptions{})
	ch, err := e.c.SwitchService(ctx, e.ns, "zeebe", proxy, DryRunServer)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ch.Server), "shardctl-proxy") || !strings.Contains(string(ch.Server), AnnotationPreviousSelector) {
		t.Errorf("the server's answer %s", ch.Server)
	}
	patch, at, err := e.c.RestartPatch(ctx, e.ns, ws[0])
	if err != nil {
		t.Fatal(err)
	}
	if ch, err = e.c.Restart(ctx, e.ns, ws[0], patch, at, DryRunServer); err != nil || !strings.Contains(string(ch.Server), RestartedAt) {
		t.Fatalf("server dry-run restart: %+v %v", ch, err)
	}
	if got := e.getService(t); got.ResourceVersion != svc.ResourceVersion {
		t.Errorf("the Service's resourceVersion moved: %s → %s", svc.ResourceVersion, got.ResourceVersion)
	}
	if d, _ := e.admin.AppsV1().Deployments(e.ns).Get(ctx, "workers", metav1.GetOptions{}); d.ResourceVersion != d0.ResourceVersion {
		t.Errorf("the Deployment's resourceVersion moved: %s → %s", d0.ResourceVersion, d.ResourceVersion)
	}
}

// Without the right to patch, the API server's refusal names the verb,
// the object and the namespace, in one line.
func TestRBACDenialNamesWhatWasDenied(t *testing.T) {
	t.Parallel()
	kc := kubetest.Start(t)
	ns := kc.Namespace(t)
	admin := &env{ns: ns, admin: kc.Client}
	admin.service(t)
	admin.pods(t, proxy, true)
	kc.Grant(t, kubetest.Limited, ns,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "pods"}, Verbs: []string{"get", "list"}},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list"}})
	c := clusterFor(t, kc.Kubeconfig(t, kubetest.Limited, ns))
	_, err := c.SwitchService(budget.Context(t, time.Minute), ns, "zeebe", proxy, DryRunNone)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Reason != metav1.StatusReasonForbidden {
		t.Fatalf("patch without the right: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"RBAC denied patch services/zeebe in namespace " + ns, `cannot patch resource "services"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%q is more than one line", msg)
	}
}

func TestLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kubetest.Admin)
	ctx := budget.Context(t, time.Minute)
	// Long enough for a's Lease to be held through the next few calls on
	// a slow machine too.
	ttl := budget.Of(2 * time.Second).Round(time.Second)
	a := e.c.Lock(e.ns, "blue-to-green", "host/1/a", ttl)
	b := e.c.Lock(e.ns, "blue-to-green", "host/2/b", ttl)
	if from, err := a.Acquire(ctx, false); err != nil || from != "" {
		t.Fatalf("a takes a free lease: %q %v", from, err)
	}
	if err := a.SaveRecord(ctx, func(r *Record) { r.Run = "run-1"; r.Done = append(r.Done, "switched") }); err != nil {
		t.Fatal(err)
	}
	_, err := b.Acquire(ctx, false)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder != "host/1/a" || !strings.Contains(err.Error(), "is run by host/1/a") || !strings.Contains(err.Error(), "renewed at") {
		t.Fatalf("b beside a: %v", err)
	}
	if err := a.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// a stops renewing; once its duration has passed b takes over, and
	// reads a's record. Whether it has passed is read from the Lease's
	// renew time: set back by more than the duration, as if a had
	// stopped that long ago, instead of sleeping out a duration long
	// enough for the steps above on the slowest machine.
	lease, err := e.admin.CoordinationV1().Leases(e.ns).Get(ctx, LeaseName("blue-to-green"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := metav1.NewMicroTime(lease.Spec.RenewTime.Add(-time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second - time.Second))
	lease.Spec.RenewTime = &stopped
	if _, err := e.admin.CoordinationV1().Leases(e.ns).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if from, err := b.Acquire(ctx, false); err != nil || from != "host/1/a" {
		t.Fatalf("b after a's lease expired: %q %v", from, err)
	}
	if rec, err := b.Record(ctx); err != nil || rec.Run != "run-1" || len(rec.Done) != 1 {
		t.Errorf("the record b found: %+v %v", rec, err)
	}
	if err := a.Renew(ctx); !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "host/2/b holds it") {
		t.Errorf("a renewing after b took over: %v", err)
	}
	// A rollback preempts whoever holds it.
	r := e.c.Lock(e.ns, "blue-to-green", "host/3/rollback", ttl)
	if from, err := r.Acquire(ctx, true); err != nil || from != "host/2/b" {
		t.Errorf("forced: %q %v", from, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, found, err := e.c.ReadLease(ctx, e.ns, "blue-to-green")
	if err != nil || !found || st.Holder != "" || st.Record.Run != "run-1" {
		t.Errorf("after release: %+v %v %v", st, found, err)
	}
}
