//go:build tools

// Package tools pins Helm, which the e2e suite uses to lint, render and install charts/gpusched.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
