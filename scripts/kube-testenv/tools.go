//go:build tools

// The kube-apiserver the tests run, built from its own module.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
