//go:build tools

// Package tools pins the scheduler-plugins scheduler (kube-scheduler with the out-of-tree plugins, Coscheduling
// among them) that the peer benchmark runs.
package tools

import (
	_ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
)
