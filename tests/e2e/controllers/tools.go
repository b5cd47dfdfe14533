//go:build tools

// Package tools pins the workload controllers the e2e suite runs: JobSet and LeaderWorkerSet.
package tools

import (
	_ "sigs.k8s.io/jobset"
	_ "sigs.k8s.io/lws/cmd"
)
