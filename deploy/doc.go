// Package deploy holds the kustomize manifests of a federation (proxy,
// registry) and, in its test, their server-side dry run against a real
// kube-apiserver. It has no Go code of its own and imports nothing.
package deploy
