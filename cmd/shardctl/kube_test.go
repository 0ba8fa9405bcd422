package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/kubetest"
	"github.com/shardctl/shardctl/migrate/kube"
)

// cluster is a namespace of the test's API server holding what a
// cutover in Kubernetes meets: the Service clients use (selecting the
// Zeebe gateway), the proxy's pods with a ready endpoint, the ConfigMap
// workers read ZEEBE_ADDRESS from, and two worker Deployments.
type cluster struct {
	kc         *kubetest.Cluster
	ns         string
	kubeconfig string // the admin's
	c          kubernetes.Interface
}

var proxyLabels = map[string]string{"app.kubernetes.io/name": "shardctl-proxy"}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	kc := kubetest.Start(t)
	k := &cluster{kc: kc, ns: kc.Namespace(t), c: kc.Client}
	k.kubeconfig = kc.Kubeconfig(t, kubetest.Admin, k.ns)
	ctx := budget.Context(t, 30*time.Second)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.c.CoreV1().Services(k.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "zeebe", Annotations: map[string]string{"owner": "payments"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "zeebe-gateway"}, Ports: []corev1.ServicePort{{Name: "gateway", Port: 26500}}}}, metav1.CreateOptions{}))
	pod, err := k.c.CoreV1().Pods(k.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "proxy-0", Labels: proxyLabels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy", Image: "shardctl"}}}}, metav1.CreateOptions{})
	must(pod, err)
	ready := true
	must(k.c.DiscoveryV1().EndpointSlices(k.ns).Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "shardctl-proxy-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "shardctl-proxy"}}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod.Name, Namespace: k.ns}}}}, metav1.CreateOptions{}))
	must(k.c.CoreV1().ConfigMaps(k.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "zeebe-client"},
		Data: map[string]string{"ZEEBE_ADDRESS": "zeebe-gateway:26500"}}, metav1.CreateOptions{}))
	for _, name := range []string{"workers", "starter"} {
		replicas := int32(2)
		must(k.c.AppsV1().Deployments(k.ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: name}}}}}}, metav1.CreateOptions{}))
		if err := k.rollOut(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// newK8sFederation is a cluster and a blue-green federation behind a
// proxy: what every k8s-mode cutover test starts from.
func newK8sFederation(t *testing.T) (*cluster, *federation) {
	t.Helper()
	k := newCluster(t)
	f := newBlueGreen(t)
	f.startProxy(t)
	return k, f
}

// rollOut sets a Deployment's status as its controller would once its
// current generation is rolled out.
func (k *cluster) rollOut(ctx context.Context, name string) error {
	d, err := k.c.AppsV1().Deployments(k.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas {
		return nil
	}
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	_, err = k.c.AppsV1().Deployments(k.ns).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	return err
}

// controller rolls both Deployments out whenever their spec changes,
// until the test ends or the returned stop is called: the part of the
// controller-manager a rollout wait needs.
func (k *cluster) controller(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, name := range []string{"workers", "starter"} {
				// A write that lost a race with a restart is made again
				// on the next round, as a controller's would be.
				if err := k.rollOut(ctx, name); err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
					t.Errorf("the test's controller: %v", err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func (k *cluster) restartedAt(t *testing.T, name string) string {
	t.Helper()
	d, err := k.c.AppsV1().Deployments(k.ns).Get(budget.Context(t, 30*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Annotations[kube.RestartedAt]
}

// state is what a rollback must give back exactly.
func (k *cluster) state(t *testing.T) string {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	svc, err := k.c.CoreV1().Services(k.ns).Get(ctx, "zeebe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := k.c.CoreV1().ConfigMaps(k.ns).Get(ctx, "zeebe-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]any{svc.Spec.Selector, svc.Annotations, cm.Data, cm.Annotations})
	return string(b)
}

func (k *cluster) versions(t *testing.T) string {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	svc, _ := k.c.CoreV1().Services(k.ns).Get(ctx, "zeebe", metav1.GetOptions{})
	cm, _ := k.c.CoreV1().ConfigMaps(k.ns).Get(ctx, "zeebe-client", metav1.GetOptions{})
	w, _ := k.c.AppsV1().Deployments(k.ns).Get(ctx, "workers", metav1.GetOptions{})
	s, _ := k.c.AppsV1().Deployments(k.ns).Get(ctx, "starter", metav1.GetOptions{})
	return strings.Join([]string{svc.ResourceVersion, cm.ResourceVersion, w.ResourceVersion, s.ResourceVersion}, ",")
}

// k8sArgs is a k8s-mode apply moving the clients of the cluster to the
// proxy, in one weight step. extra comes last: a flag given again there
// (--service, --selector) is the one that counts.
func (k *cluster) k8sArgs(kubeconfig string, extra ...string) []string {
	return append([]string{"cutover", "apply", "--from", "blue", "--to", "green", "--steps", "100", "--step-pause", "1s",
		"--gate-window", "30s", "--poll", "200ms", "--yes", "--mode", "k8s", "--kubeconfig", kubeconfig,
		"--service", "zeebe", "--selector", "app.kubernetes.io/name=shardctl-proxy",
		"--configmap", "zeebe-client", "--key", "ZEEBE_ADDRESS", "--value", "shardctl-proxy:26500",
		"--restart", "deploy/workers,deployment/starter"}, extra...)
}

// The whole cutover in Kubernetes mode: the rollouts that never complete
// time it out (exit 4) with the Service switched, the ConfigMap rewritten
// and both Deployments restarted; the next apply resumes without
// restarting them again and runs to done; status shows the Kubernetes
// side, through kubectl too; rollback restores the Service and the
// ConfigMap exactly and restarts the workers again.
func TestK8sCutoverEndToEnd(t *testing.T) {
	t.Parallel()
	k, f := newK8sFederation(t)
	before := k.state(t)

	r := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", k.k8sArgs(k.kubeconfig, "--rollout-timeout", "3s")...)
	if r.code != 4 || !strings.Contains(r.stderr, "rollout not complete") || !strings.Contains(r.stderr, "cutover apply resumes it") {
		t.Fatalf("apply with rollouts that never complete: exit %d, want 4\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	after := k.state(t)
	for _, want := range []string{`"app.kubernetes.io/name":"shardctl-proxy"`, `"shardctl.io/previous-selector":"{\"app\":\"zeebe-gateway\"}"`,
		`"ZEEBE_ADDRESS":"shardctl-proxy:26500"`, `"owner":"payments"`} {
		if !strings.Contains(after, want) {
			t.Errorf("after the clients step: %s, want %s", after, want)
		}
	}
	restarted := map[string]string{}
	for _, name := range []string{"workers", "starter"} {
		if restarted[name] = k.restartedAt(t, name); restarted[name] == "" {
			t.Errorf("%s not restarted", name)
		}
	}
	if w := f.view(t).Weights; w["green"] != 0 {
		t.Errorf("weights moved before the clients did: %v", w)
	}

	k.controller(t)
	r = runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", append(k.k8sArgs(k.kubeconfig), "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("the resumed apply: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	events := cutoverEvents(t, r.stdout)
	if events[0].Event != "resumed" || events[len(events)-1].Event != "done" {
		t.Errorf("events %+v: want resumed … done", events)
	}
	for _, name := range []string{"workers", "starter"} {
		if got := k.restartedAt(t, name); got != restarted[name] {
			t.Errorf("%s restarted again on resume: %s, was %s", name, got, restarted[name])
		}
	}
	if !strings.Contains(r.stdout, "was restarted at") || !strings.Contains(r.stdout, `successfully rolled out`) {
		t.Errorf("the resumed apply did not say it waited for the rollouts it had made: %s", r.stdout)
	}
	if w := f.view(t).Weights; w["green"] != 100 {
		t.Errorf("weights after done: %v", w)
	}

	st := runBin(t, bin, f.env, "", "cutover", "status", "--kubeconfig", k.kubeconfig)
	for _, want := range []string{"Done", "kubernetes: lease " + k.ns + "/shardctl-cutover-blue-to-green: free", "kubernetes: done: service/zeebe",
		"kubernetes: service zeebe selects app.kubernetes.io/name=shardctl-proxy", `deployment/workers: deployment "workers" successfully rolled out`} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status: exit %d, no %q in:\n%s%s", st.code, want, st.stdout, st.stderr)
		}
	}
	t.Logf("cutover status:\n%s", st.stdout)
	// Without the cluster, the registry's side stands and says so.
	if st := runBin(t, bin, f.env, "", "cutover", "status"); st.code != 0 || !strings.Contains(st.stdout, "kubernetes: namespace "+k.ns+" cannot be read: ") {
		t.Errorf("status without a kubeconfig: exit %d, want 0 saying the cluster could not be read:\n%s%s", st.code, st.stdout, st.stderr)
	}
	kubectlStatus(t, f.env, k)

	time.Sleep(time.Second) // restartedAt has a resolution of a second
	rb := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", "cutover", "rollback", "--kubeconfig", k.kubeconfig)
	if rb.code != 0 {
		t.Fatalf("rollback: exit %d\n%s%s", rb.code, rb.stdout, rb.stderr)
	}
	t.Logf("cutover rollback:\n%s", rb.stdout)
	if got := k.state(t); got != before {
		t.Errorf("after the rollback:\n%s\nbefore the cutover:\n%s", got, before)
	}
	for _, name := range []string{"workers", "starter"} {
		if got := k.restartedAt(t, name); got == restarted[name] {
			t.Errorf("%s not restarted by the rollback to read the old endpoint", name)
		}
	}
	if w := f.view(t).Weights; w["blue"] != 100 {
		t.Errorf("weights after the rollback: %v", w)
	}
}

// kubectlStatus runs `kubectl shard cutover status` through the real
// kubectl, shardctl installed on PATH as its plugin.
func kubectlStatus(t *testing.T, env []string, k *cluster) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("no kubectl on this machine: kubectl shard cutover status not tried through it")
		return
	}
	dir := t.TempDir()
	if r := runBin(t, bin, baseEnv(), "", "plugin", "install-kubectl", "--dir", dir); r.code != 0 {
		t.Fatalf("install-kubectl: %s", r.stderr)
	}
	env = append(append([]string{}, env...), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	r := runBin(t, kubectl, env, "", "shard", "cutover", "status", "--kubeconfig", k.kubeconfig, "--context", kubetest.Context, "-n", k.ns)
	if r.code != 0 || !strings.Contains(r.stdout, "kubernetes: service zeebe selects app.kubernetes.io/name=shardctl-proxy") {
		t.Errorf("kubectl shard cutover status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Two applies: the second is refused naming the first, which holds the
// Lease; the first killed (-9), the second is refused until the Lease
// expires, then takes it over and resumes where the first stopped,
// restarting nothing twice.
func TestK8sCutoverLease(t *testing.T) {
	t.Parallel()
	k, f := newK8sFederation(t)
	// The Lease outlives the kill by up to its ttl: long enough, on a
	// slow machine too, for the next apply (a process start and one read
	// of the Lease) to meet it still held; the test waits it out, so it
	// is not stretched as far as a limit would be.
	ttl := budget.Capped(4*time.Second, 10*time.Second).Round(time.Second)
	args := k.k8sArgs(k.kubeconfig, "--rollout-timeout", "10m", "--lease-ttl", ttl.String())
	first, _ := startBin(t, f.env, bin, args...)
	budget.Eventually(t, time.Minute, "the first apply to restart the workers", func() bool { return k.restartedAt(t, "starter") != "" })
	restarted := k.restartedAt(t, "workers")

	second := runBin(t, bin, f.env, "", args...)
	if second.code != 3 || !strings.Contains(second.stderr, "is run by "+hostname(t)) || !strings.Contains(second.stderr, "renewed at") {
		t.Fatalf("a second apply: exit %d, want 3 naming the holder\n%s", second.code, second.stderr)
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	killed := time.Now()
	if r := runBin(t, bin, f.env, "", args...); r.code != 3 || !strings.Contains(r.stderr, "is run by") {
		t.Errorf("right after the kill, the lease not expired: exit %d, want 3\n%s", r.code, r.stderr)
	}
	time.Sleep(time.Until(killed.Add(ttl + 500*time.Millisecond)))
	k.controller(t)
	r := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", append(args, "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("apply after the lease expired: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	events := cutoverEvents(t, r.stdout)
	if events[0].Event != "resumed" || events[len(events)-1].Event != "done" {
		t.Errorf("events %+v: want resumed … done", events)
	}
	if got := k.restartedAt(t, "workers"); got != restarted {
		t.Errorf("workers restarted twice: %s, then %s", restarted, got)
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// --dry-run=server prints the patches and the API server's answers and
// stores nothing (no resourceVersion moves, no cutover is recorded); a
// user who may read but not patch gets one line naming what RBAC denied,
// exit 1, with nothing changed.
func TestK8sCutoverDryRunAndRBAC(t *testing.T) {
	t.Parallel()
	k, f := newK8sFederation(t)
	versions := k.versions(t)
	r := runBin(t, bin, f.env, "", k.k8sArgs(k.kubeconfig, "--dry-run=server")...)
	if r.code != 0 {
		t.Fatalf("--dry-run=server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("cutover apply --dry-run=server:\n%s", r.stdout)
	for _, want := range []string{"the API server's dry-run answers", "application/merge-patch+json patch: ", `server: {"annotations":`, "restartedAt", "dry run (server): nothing changed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--dry-run=server printed no %q:\n%s", want, r.stdout)
		}
	}
	if got := k.versions(t); got != versions {
		t.Errorf("resourceVersions moved under --dry-run=server: %s → %s", versions, got)
	}
	if st := runBin(t, bin, f.env, "", "cutover", "status"); st.code != 1 || !strings.Contains(st.stderr, "no cutover") {
		t.Errorf("a cutover recorded by a dry run: exit %d %s%s", st.code, st.stdout, st.stderr)
	}

	k.kc.Grant(t, kubetest.Limited, k.ns,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services", "configmaps"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}})
	limited := k.kc.Kubeconfig(t, kubetest.Limited, k.ns)
	r = runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", k.k8sArgs(limited)...)
	want := fmt.Sprintf("RBAC denied patch services/zeebe in namespace %s: ", k.ns)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, `cannot patch resource "services"`) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("apply without the right to patch the Service: exit %d, want 1 and one line with %q:\n%s", r.code, want, r.stderr)
	}
	if got := k.versions(t); got != versions {
		t.Errorf("a refused apply changed objects: %s → %s", versions, got)
	}
	if w := f.view(t).Weights; w["green"] != 0 {
		t.Errorf("weights moved: %v", w)
	}
}

// A switch to pods none of which is ready is refused before anything is
// written (exit 3, the cutover Failed), and says why.
func TestK8sCutoverRefusesAnUnreadyTarget(t *testing.T) {
	t.Parallel()
	k, f := newK8sFederation(t)
	state := k.state(t)
	r := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", k.k8sArgs(k.kubeconfig, "--selector", "app.kubernetes.io/name=shardctl-proxy-canary")...)
	if r.code != 3 || !strings.Contains(r.stderr, "would select no ready pod") {
		t.Errorf("switch to no ready pod: exit %d, want 3\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := k.state(t); got != state {
		t.Errorf("a refused cutover changed objects: %s → %s", state, got)
	}
	if k.restartedAt(t, "workers") != "" {
		t.Error("a refused cutover restarted workers")
	}
}

// Flags that cannot make a k8s plan are usage errors, found before
// anything is read.
func TestK8sCutoverBadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--service", "zeebe"}, "give --mode k8s"},
		{[]string{"--mode", "k8s", "-n", "x"}, "--mode k8s needs --service"},
		{[]string{"--mode", "k8s", "-n", "x", "--service", "zeebe"}, "--service needs --selector"},
		{[]string{"--mode", "k8s", "-n", "x", "--service", "zeebe", "--selector", "app"}, "want key=value"},
		{[]string{"--mode", "k8s", "-n", "x", "--configmap", "c", "--secret", "s", "--key", "K", "--value", "V"}, "both given"},
		{[]string{"--mode", "k8s", "-n", "x", "--configmap", "c"}, "need --key and --value"},
		{[]string{"--mode", "k8s", "-n", "x", "--configmap", "c", "--key", "K", "--value", "V", "--restart", "workers"}, "want TYPE/NAME"},
		{[]string{"--mode", "kubernetes"}, `--mode "kubernetes": want registry or k8s`},
		{[]string{"--dry-run", "yes"}, `--dry-run "yes": want none, client or server`},
	} {
		args := append([]string{"cutover", "apply", "--from", "blue", "--to", "green", "--yes"}, tt.args...)
		r := runBin(t, bin, baseEnv(), "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: exit %d, want 2 saying %q: %s", tt.args, r.code, tt.want, r.stderr)
		}
	}
}

// The Role deploy/ ships is enough for a whole cutover and its rollback:
// a user bound to it alone (no other right) runs both.
func TestK8sCutoverWithTheShippedRole(t *testing.T) {
	t.Parallel()
	k, f := newK8sFederation(t)
	ctx := budget.Context(t, 30*time.Second)
	// The Role names the runbook's Service: clients use zeebe-gateway here.
	svc, err := k.c.CoreV1().Services(k.ns).Get(ctx, "zeebe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.ObjectMeta = metav1.ObjectMeta{Name: "zeebe-gateway"}
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	if _, err := k.c.CoreV1().Services(k.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k.kc.Grant(t, kubetest.Limited, k.ns, shippedRole(t).Rules...)
	limited := k.kc.Kubeconfig(t, kubetest.Limited, k.ns)
	k.controller(t)
	if r := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", k.k8sArgs(limited, "--service", "zeebe-gateway")...); r.code != 0 {
		t.Fatalf("apply with the shipped Role: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", "cutover", "rollback", "--kubeconfig", limited); r.code != 0 {
		t.Fatalf("rollback with the shipped Role: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := runBin(t, bin, f.env, "", "cutover", "status", "--kubeconfig", limited); st.code != 3 || !strings.Contains(st.stdout, "kubernetes: service zeebe-gateway selects app=zeebe-gateway") {
		t.Errorf("status with the shipped Role: exit %d\n%s%s", st.code, st.stdout, st.stderr)
	}
}

// shippedRole is the Role of deploy/base/rbac.yaml.
func shippedRole(t *testing.T) rbacv1.Role {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "base", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var role rbacv1.Role
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		if role.Kind == "Role" {
			return role
		}
	}
	t.Fatal("deploy/base/rbac.yaml holds no Role")
	return rbacv1.Role{}
}
