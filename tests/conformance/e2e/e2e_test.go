// Package e2e is Kubernetes' end-to-end test suite cut down to its scheduling tests
// (k8s.io/kubernetes/test/e2e/scheduling), so the binary is built in a fraction of the time of the full e2e.test.
// It does what k8s.io/kubernetes/test/e2e/e2e_test.go and e2e.go do for one suite: register the framework's flags,
// read them, and run the specs with Ginkgo. Cluster providers other than "local"/"skeleton" are left out: the
// gpusched conformance runner (../run.py) points it at the local control plane of tests/e2e/localcluster.py.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	netutils "k8s.io/utils/net"

	// The logging flags (-v and friends) on the command line, as in the full suite.
	_ "k8s.io/component-base/logs/testinit"

	// The feature and label constants the specs are tagged with.
	_ "k8s.io/kubernetes/test/e2e/feature"

	// The only test source: [sig-scheduling].
	_ "k8s.io/kubernetes/test/e2e/scheduling"

	// The framework's own hooks: on failure, dump the test namespace's events and pods (what a failure report
	// needs to be diagnosed) and the node helpers' defaults.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/format"
)

func TestMain(m *testing.M) {
	versionFlag := flag.CommandLine.Bool("version", false, "Displays version information.")
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()

	if *versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.CommandLine.Args())
		os.Exit(1)
	}
	// Manifests the specs read (none of the scheduling specs need a repository checkout).
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	klog.Infof("Starting e2e run %q on Ginkgo node %d", framework.RunID, suiteConfig.ParallelProcess)
	ginkgo.RunSpecs(t, "Kubernetes e2e suite (sig-scheduling)", suiteConfig, reporterConfig)
}

// The part of the full suite's setup the scheduling specs depend on: every node schedulable before the first
// spec, the node count the framework sizes some specs by, and the cluster's IP family (host-port specs read it).
var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "Error loading client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	if framework.TestContext.CloudConfig.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
	}
	svc, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	framework.ExpectNoError(err, "Error reading the kubernetes Service")
	framework.TestContext.IPFamily = "ipv4"
	if netutils.IsIPv6String(svc.Spec.ClusterIP) {
		framework.TestContext.IPFamily = "ipv6"
	}
	framework.Logf("e2e test version: %s", version.Get().GitVersion)
	if v, err := c.Discovery().ServerVersion(); err == nil {
		framework.Logf("kube-apiserver version: %s", v.GitVersion)
	}
	framework.Logf("Cluster IP family: %s, schedulable nodes: %d",
		framework.TestContext.IPFamily, framework.TestContext.CloudConfig.NumNodes)
})
