// Package kubetest runs a real kube-apiserver over a real etcd on
// 127.0.0.1 for the tests that talk to Kubernetes: patch semantics,
// resourceVersion conflicts, RBAC and server-side dry-run are the API
// server's own, which no fake reproduces. There is no controller-manager:
// tests make the state a controller would (Deployment status, Pods that
// stay Pending, EndpointSlices) themselves, each in a namespace of its own.
//
// The binaries come from $SHARDCTL_KUBE_TESTENV, else from
// `scripts/tools.sh kube-testenv`, which builds them once per machine
// (make test does that before any test's clock starts).
// Tests only: no runtime or tool imports it outside its tests.
package kubetest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/shardctl/shardctl/internal/budget"
	shardcerts "github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/certs/certstest"
	"github.com/shardctl/shardctl/internal/proctest"
)

// EnvTestenv names a folder holding kube-apiserver and etcd; EnvNoKube,
// when set, skips the tests that need them instead of failing (for a
// machine that cannot build them; CI builds them, so there a missing
// binary is a failure).
const (
	EnvTestenv = "SHARDCTL_KUBE_TESTENV"
	EnvNoKube  = "SHARDCTL_TEST_NO_KUBE"
)

// Users the API server knows by token: Admin is in system:masters;
// Limited has no rights until a test binds a Role to it.
const (
	Admin   = "admin"
	Limited = "limited"
)

// Context is the name of the kubeconfig context of each user's file.
const Context = "kubetest"

// Cluster is a running API server.
type Cluster struct {
	URL    string
	CAFile string
	// Client is the admin's, for the state a test sets up.
	Client kubernetes.Interface
	// Config is the admin's REST config.
	Config *rest.Config

	dir    string
	tokens map[string]string
	procs  []*process
}

var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// Main runs a package's tests and stops the cluster Start started: a
// package that calls Start has `func TestMain(m *testing.M) {
// os.Exit(kubetest.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if c := shared.cluster; c != nil {
		c.stop()
		os.RemoveAll(c.dir)
	}
	return code
}

// Start returns the package's cluster, started on first use (3–4 s on an
// idle machine); each test takes a fresh Namespace of it.
func Start(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.err = fmt.Errorf("the test that started it stopped first: see %s", t.Name())
		shared.cluster, shared.err = start(t)
	})
	if shared.err != nil {
		if os.Getenv(EnvNoKube) != "" {
			t.Skipf("no Kubernetes API server for this test, and %s is set: %v", EnvNoKube, shared.err)
		}
		t.Fatalf("a real kube-apiserver is needed by this test: %v (make test builds it with scripts/tools.sh kube-testenv; set %s=1 to skip these tests instead)", shared.err, EnvNoKube)
	}
	return shared.cluster
}

// binaries finds kube-apiserver and etcd, building them when needed.
func binaries() (string, error) {
	if dir := os.Getenv(EnvTestenv); dir != "" {
		return dir, nil
	}
	_, file, _, _ := runtime.Caller(0)
	tools := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "tools.sh")
	cmd := exec.Command(tools, "kube-testenv")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s kube-testenv: %v\n%s", tools, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// start runs etcd and the API server; t is the first test to ask, whose
// Fatal ends the start (the cluster outlives it).
func start(t testing.TB) (c *Cluster, err error) {
	bin, err := binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shardctl-kubetest-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir, tokens: map[string]string{Admin: "admin-token", Limited: "limited-token"}}
	defer func() {
		if err != nil {
			c.stop()
			os.RemoveAll(dir)
		}
	}()
	certs := certstest.Write(t, dir)
	c.CAFile = certs.CA
	client, peer, secure := proctest.FreePort(t), proctest.FreePort(t), proctest.FreePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	etcd, err := c.run(filepath.Join(bin, "etcd"), "--name", "kubetest", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "kubetest="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(etcd, etcdURL+"/health", http.DefaultClient, ""); err != nil {
		return nil, err
	}

	tokens := filepath.Join(dir, "tokens.csv")
	var lines []string
	for user, token := range c.tokens {
		group := ""
		if user == Admin {
			group = ",\"system:masters\""
		}
		lines = append(lines, fmt.Sprintf("%s,%s,%s-uid%s", token, user, user, group))
	}
	if err := os.WriteFile(tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", secure)
	api, err := c.run(filepath.Join(bin, "kube-apiserver"), "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(secure),
		"--cert-dir", filepath.Join(dir, "apiserver"),
		"--tls-cert-file", certs.Server, "--tls-private-key-file", certs.ServerKey,
		"--token-auth-file", tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", certs.ServerKey, "--service-account-signing-key-file", certs.ServerKey,
		"--service-cluster-ip-range", "10.0.0.0/24", "--disable-admission-plugins", "ServiceAccount",
		"--endpoint-reconciler-type", "none")
	if err != nil {
		return nil, err
	}
	pool, err := shardcerts.Pool(certs.CA)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := waitHTTP(api, c.URL+"/readyz", hc, c.tokens[Admin]); err != nil {
		return nil, err
	}
	c.Config = &rest.Config{Host: c.URL, BearerToken: c.tokens[Admin], TLSClientConfig: rest.TLSClientConfig{CAFile: certs.CA}}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// Kubeconfig writes a kubeconfig file for user whose current context
// (Context) is namespace, and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, user, namespace string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.CAFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: c.tokens[user]}
	cfg.Contexts[Context] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = Context
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Namespace creates a namespace for one test. It is not deleted: with no
// controller-manager a deleted namespace stays Terminating for good.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	// A DNS label: lower-case letters, digits and dashes.
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := c.Client.CoreV1().Namespaces().Create(budget.Context(t, 30*time.Second), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(name, "-") + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// Grant binds a Role with rules to user in namespace.
func (c *Cluster) Grant(t testing.TB, user, namespace string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	name := "kubetest-" + user
	if _, err := c.Client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server authorizes from a cache its informers fill: a call
	// right after the create may still be denied. Return once every
	// right granted is in force, so a test sees only the denials it set up.
	for _, r := range rules {
		// A rule limited to resourceNames allows nothing without a name:
		// ask for each name it allows.
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, group := range r.APIGroups {
			for _, resource := range r.Resources {
				resource, sub, _ := strings.Cut(resource, "/")
				for _, verb := range r.Verbs {
					for _, name := range names {
						attrs := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource, Subresource: sub, Name: name}
						budget.Eventually(t, 30*time.Second, fmt.Sprintf("%s may %s %s %s", user, verb, resource, name), func() bool {
							review, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
								Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}, metav1.CreateOptions{})
							return err == nil && review.Status.Allowed
						})
					}
				}
			}
		}
	}
}

// process is a server the cluster runs.
type process struct {
	cmd  *exec.Cmd
	logs *proctest.LockedBuffer
	done chan struct{}
	err  error
}

func (c *Cluster) run(bin string, args ...string) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), logs: &proctest.LockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop ends the servers, the API server before its etcd.
func (c *Cluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// waitHTTP waits for url to answer 200 while p runs.
func waitHTTP(p *process, url string, hc *http.Client, token string) error {
	deadline := time.Now().Add(budget.Of(60 * time.Second))
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s ended before %s answered: %v\n%s", filepath.Base(p.cmd.Path), url, p.err, tail(p.logs.String(), 30))
		default:
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %s within %v (last: %s)\n%s", filepath.Base(p.cmd.Path), url, budget.Of(60*time.Second), last, tail(p.logs.String(), 30))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
