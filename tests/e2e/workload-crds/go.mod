// The workload projects whose CRDs the e2e suite installs (tests/e2e/fetch-workload-crds.sh reads the versions
// here and checks each module's zip against go.sum). Nothing is built from this module: require lines only.
// NodeResourceTopology's CRD (tests/e2e/test_numa_e2e.py) comes from its API module. The JobSet CRD (a TrainJob's
// child) comes from the version pinned in ../controllers/go.mod.
module gpusched.io/e2e/workload-crds

go 1.26.0

require (
	github.com/k8stopologyawareschedwg/noderesourcetopology-api v0.1.2
	github.com/kubeflow/mpi-operator v0.8.0
	github.com/kubeflow/trainer/v2 v2.3.0
	github.com/kubeflow/training-operator v1.8.1
	github.com/ray-project/kuberay/ray-operator v1.6.1
)
