// Package kube is the Kubernetes side of a cutover: the Service whose
// selector decides which pods clients reach, the ConfigMap or Secret key
// that tells workers and starters where Zeebe is, the rollout that makes
// them read it again, and the Lease that keeps a second cutover out. Every
// change records what it replaced on the object it changes, so that a
// rollback restores it exactly, and is refused rather than made over a
// change someone else made meanwhile.
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/shardctl/shardctl/internal/signals"
)

// Annotations shardctl writes.
const (
	// AnnotationPreviousSelector on a Service: the selector it had before
	// a cutover switched it (JSON), removed when a rollback restores it.
	AnnotationPreviousSelector = "shardctl.io/previous-selector"
	// AnnotationPreviousValues on a ConfigMap or Secret: the values of the
	// keys a cutover rewrote (JSON, key → value), each removed when a
	// rollback restores it.
	AnnotationPreviousValues = "shardctl.io/previous-values"
	// AnnotationRecord on a cutover's Lease: what its Kubernetes steps did.
	AnnotationRecord = "shardctl.io/cutover"
	// RestartedAt is the pod template annotation `kubectl rollout restart`
	// sets.
	RestartedAt = "kubectl.kubernetes.io/restartedAt"
)

// DryRun is how much of a change is sent: nothing (client), or sent for
// the API server to check and answer without storing it (server).
type DryRun string

const (
	DryRunNone   DryRun = ""
	DryRunClient DryRun = "client"
	DryRunServer DryRun = "server"
)

// ParseDryRun reads --dry-run: none, client or server.
func ParseDryRun(s string) (DryRun, error) {
	switch s {
	case "", "none":
		return DryRunNone, nil
	case "client", "server":
		return DryRun(s), nil
	}
	return "", fmt.Errorf("--dry-run %q: want none, client or server", s)
}

func (d DryRun) options() []string {
	if d == DryRunServer {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// Spec is the Kubernetes part of a cutover: how clients reach Zeebe and
// what moves them to the proxy.
type Spec struct {
	// Namespace holds every object below and the Lease.
	Namespace string `json:"namespace"`
	// Service is the Service clients use; Selector the labels of the pods
	// it selects once switched (the green side: the proxy).
	Service  string            `json:"service,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
	// ConfigMap or Secret holds Key, the endpoint workloads read at start;
	// it is rewritten to Value.
	ConfigMap string `json:"configMap,omitempty"`
	Secret    string `json:"secret,omitempty"`
	Key       string `json:"key,omitempty"`
	Value     string `json:"value,omitempty"`
	// Restart are the workloads (deploy/a, sts/b) restarted after the
	// rewrite, each waited for within RolloutTimeout.
	Restart        []string         `json:"restart,omitempty"`
	RolloutTimeout signals.Duration `json:"rolloutTimeout,omitempty"`
}

// Validate says what is missing or contradictory.
func (s Spec) Validate() error {
	switch {
	case s.Namespace == "":
		return errors.New("no namespace: give -n or set one in the kubeconfig context")
	case s.Service == "" && s.ConfigMap == "" && s.Secret == "":
		return errors.New("--mode k8s needs --service, or --configmap/--secret with --key and --value")
	case s.Service != "" && len(s.Selector) == 0:
		return errors.New("--service needs --selector: the labels of the pods it selects once switched (e.g. app.kubernetes.io/name=shardctl-proxy)")
	case s.Service == "" && len(s.Selector) > 0:
		return errors.New("--selector without --service")
	case s.ConfigMap != "" && s.Secret != "":
		return errors.New("--configmap and --secret both given: the endpoint is in one of them")
	case (s.ConfigMap != "" || s.Secret != "") && (s.Key == "" || s.Value == ""):
		return errors.New("--configmap/--secret need --key and --value")
	case s.ConfigMap == "" && s.Secret == "" && (s.Key != "" || s.Value != ""):
		return errors.New("--key and --value need --configmap or --secret")
	}
	for k, v := range s.Selector {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("--selector: label %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("--selector: value %q of %s: %s", v, k, strings.Join(errs, "; "))
		}
	}
	for _, r := range s.Restart {
		if kind, name, ok := strings.Cut(r, "/"); !ok || kind == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("--restart %q: want TYPE/NAME, e.g. deploy/workers", r)
		}
	}
	return nil
}

// Config is the object holding the endpoint: "configmap" or "secret",
// and its name ("" when there is none).
func (s Spec) Config() (kind, name string) {
	if s.Secret != "" {
		return "secret", s.Secret
	}
	if s.ConfigMap != "" {
		return "configmap", s.ConfigMap
	}
	return "", ""
}

// ParseSelector reads key=value[,key=value] as `kubectl set selector`
// takes it.
func ParseSelector(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--selector %q: want key=value[,key=value]", s)
		}
		out[k] = v
	}
	return out, nil
}

// FormatSelector writes a selector as ParseSelector reads it, keys sorted.
func FormatSelector(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}

// ValidLeaseName says whether a cutover's name can name its Lease.
func ValidLeaseName(cutover string) error {
	if errs := validation.IsDNS1123Subdomain(LeaseName(cutover)); len(errs) > 0 {
		return fmt.Errorf("cutover name %q cannot name a Kubernetes Lease: %s", cutover, strings.Join(errs, "; "))
	}
	return nil
}

// Cluster is the API server a cutover changes.
type Cluster struct {
	client  kubernetes.Interface
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
}

// New connects to the cluster the kubectl flags name.
func New(getter genericclioptions.RESTClientGetter) (*Cluster, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	mapper, err := getter.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return &Cluster{client: client, dynamic: dyn, mapper: mapper}, nil
}

// Change is one write to the cluster: the exact patch, as sent (a
// Secret's values masked, as kubectl diff masks them).
type Change struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// What is the change in words.
	What      string          `json:"what"`
	PatchType string          `json:"patchType,omitempty"`
	Patch     json.RawMessage `json:"patch,omitempty"`
	// Server is what the API server answered to a server-side dry run:
	// the fields the patch touched as it would store them.
	Server json.RawMessage `json:"server,omitempty"`
}

// Ref is kind/name, as kubectl names an object.
func (c Change) Ref() string { return strings.ToLower(c.Kind) + "/" + c.Name }

// Line is the change for a person.
func (c Change) Line() string {
	return fmt.Sprintf("%s (namespace %s): %s", c.Ref(), c.Namespace, c.What)
}

// apiError is a refusal of the API server in one line that names what
// was asked: the verb, the object and the namespace.
func apiError(verb, ref, namespace string, err error) error {
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return &APIError{Verb: verb, Ref: ref, Namespace: namespace, Reason: status.Status().Reason, err: err}
	}
	return fmt.Errorf("%s %s in namespace %s: %w", verb, ref, namespace, err)
}

// APIError is what the API server refused.
type APIError struct {
	Verb, Ref, Namespace string
	Reason               metav1.StatusReason
	err                  error
}

func (e *APIError) Error() string {
	msg := e.err.Error()
	if e.Reason == metav1.StatusReasonForbidden {
		return fmt.Sprintf("RBAC denied %s %s in namespace %s: %s", e.Verb, e.Ref, e.Namespace, msg)
	}
	return fmt.Sprintf("%s %s in namespace %s: %s", e.Verb, e.Ref, e.Namespace, msg)
}

func (e *APIError) Unwrap() error { return e.err }

// ErrRefused is a change that would leave clients without a ready pod,
// or undo a change someone else made: nothing was changed.
var ErrRefused = errors.New("refused")

func refusef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Target says in a few words where the clients move.
func (s Spec) Target() string {
	var parts []string
	if s.Service != "" {
		parts = append(parts, fmt.Sprintf("service %s → %s", s.Service, FormatSelector(s.Selector)))
	}
	if kind, name := s.Config(); name != "" {
		parts = append(parts, fmt.Sprintf("%s %s %s", kind, name, s.Key))
	}
	if len(s.Restart) > 0 {
		parts = append(parts, "restart "+strings.Join(s.Restart, ","))
	}
	return strings.Join(parts, ", ")
}

// Actions say in words what the Kubernetes step does.
func (s Spec) Actions() []string {
	var out []string
	if s.Service != "" {
		out = append(out, fmt.Sprintf("switch service %s/%s to select %s once those pods have a ready endpoint (the old selector kept in %s)",
			s.Namespace, s.Service, FormatSelector(s.Selector), AnnotationPreviousSelector))
	}
	if kind, name := s.Config(); name != "" {
		value := s.Value
		if kind == "secret" {
			value = "***"
		}
		out = append(out, fmt.Sprintf("set %s of %s %s/%s to %s (the old value kept in %s)", s.Key, kind, s.Namespace, name, value, AnnotationPreviousValues))
	}
	if len(s.Restart) > 0 {
		out = append(out, fmt.Sprintf("restart %s as kubectl rollout restart does, and wait for each rollout (at most %v)",
			strings.Join(s.Restart, ", "), time.Duration(s.RolloutTimeout)))
	}
	return out
}
