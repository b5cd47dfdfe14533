"""The end-to-end suite and its helpers (a local control plane, a client, gpusched run as a subprocess), imported
as ``tests.e2e.*`` by the suite, the conformance runner and the benchmarks."""
