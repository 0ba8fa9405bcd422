// Package deploy holds the manifests that run the federation in a
// cluster; this test applies each kustomization to a real API server with
// a server-side dry run, so a field the API does not know, a missing
// required one or a bad reference fails here and not at a user's apply.
package deploy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

func TestManifestsApply(t *testing.T) {
	kc := kubetest.Start(t)
	dyn, err := dynamic.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	for _, dir := range []string{".", "rehearsal", "secure"} {
		t.Run(dir, func(t *testing.T) {
			ns := kc.Namespace(t)
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			// An overlay sets the test's namespace, as a user's would theirs.
			overlay := t.TempDir()
			base, err := filepath.Rel(overlay, abs) // kustomize takes no absolute base
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: "+ns+"\nresources:\n  - "+base+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
			if err != nil {
				t.Fatal(err)
			}
			ctx := budget.Context(t, time.Minute)
			for _, res := range resources.Resources() {
				body, err := res.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				gvk := res.GetGvk()
				m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
				if err != nil {
					t.Errorf("%s %s: %v", gvk, res.GetName(), err)
					continue
				}
				client := dyn.Resource(m.Resource).Namespace(ns)
				if m.Scope.Name() != meta.RESTScopeNameNamespace {
					t.Errorf("%s %s is not namespaced: the manifests stay in the namespace they are applied to", gvk.Kind, res.GetName())
					continue
				}
				_, err = client.Patch(ctx, res.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
					FieldManager: "shardctl-manifests-test", DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
				if err != nil {
					t.Errorf("%s %s: %v", gvk.Kind, res.GetName(), err)
				}
			}
			if n := len(resources.Resources()); n < 9 {
				t.Errorf("%d objects: the kustomization lost some", n)
			}
		})
	}
}
