//go:build tools

// Package tools records the one main package ../build-older-apiserver.sh builds,
// so that `go mod tidy` keeps its dependencies in go.mod/go.sum.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
