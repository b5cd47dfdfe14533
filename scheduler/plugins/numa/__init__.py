"""NUMA zones: place a pod only where the node's kubelet (its Topology Manager) will admit it (issue 42).

:mod:`.admission` replays the kubelet's decision on the zones a NodeResourceTopology publishes."""
