//go:build tools

// Package tools pins the Volcano components the peer benchmark runs: its scheduler and, for plain pods (which
// the scheduler skips until a PodGroup names them), the controller manager whose podgroup controller makes one.
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
