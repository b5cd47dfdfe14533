//go:build tools

// Package tools pins the Kueue controller manager the e2e suite runs next to gpusched (tests/e2e/test_kueue_e2e.py).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
