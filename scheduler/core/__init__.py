"""The scheduling core: everything that decides. One Job model (a single pod is a job of one member) and the
session that runs the profile's actions on it.

- ``loop`` (the loop over the queue), ``session`` (one job's pass through the actions), ``actions/`` (allocate,
  consolidate, reclaim, preempt: each a module behind one interface, registered), ``statement`` (the steps an action
  records, committed or discarded as one);
- ``cycle`` (one pod's filter and score over the snapshot), ``gang`` and ``jobs`` (jobs and their members),
  ``holds`` (the one registry of room held for jobs), ``memo`` (searches that found nothing), ``capacity`` and
  ``reason_texts`` (what the messages say), ``explanation`` (what ``gpusched explain`` answers);
- ``consolidation/`` (moving running pods to make room, safely) and ``preemption/`` (the victim searches of
  reclaim and preempt, and the nominations they leave);
- ``root``: the composition root the operator, the simulator and the benchmarks build the core with.
"""
