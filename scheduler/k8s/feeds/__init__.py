"""What flows in: the watches, their parsing into the cache and the loop, kopf's handlers, the grouper that makes
PodGroups of workloads, and which optional APIs the cluster serves."""
