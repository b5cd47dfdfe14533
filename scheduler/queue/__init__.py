"""Pending work: an active heap, a backoff heap and an unschedulable pool woken by cluster events
(:mod:`scheduler.queue.scheduling`); the tenant-queue ordering for fair share plugs in as its ``less``."""
