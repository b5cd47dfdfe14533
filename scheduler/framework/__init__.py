"""The extension points (as Protocols), the Status type, the per-cycle state, the reasons filters declare, and
profiles.

- ``interface``: the extension points (pre-filter, filter, score, normalize, reserve), ``Status`` and its codes,
  ``CycleState``;
- ``reasons``: what a filter's reason codes mean (:class:`~scheduler.framework.reasons.Reason`), declared by
  the plugin that sets them; ``scheduler.core.registry.REASONS`` gathers them for the core and explain;
- ``profile`` and ``args``: which plugins run, with which weights and arguments.

Adding a filter
---------------

A filter (say ``numa``) takes these files:

1. ``scheduler/plugins/numa.py``: the plugin class, with ``name = "numa"``; ``reasons``, its ``Reason``
   declarations, each with its code (one nobody declares yet, among 1..``layout.RESOURCE - 1`` and -128..-1:
   ``scheduler.core.registry.REASONS`` refuses a code declared twice and names the free ones), kube-scheduler's
   words for it, whether an eviction on the node can clear it (``eviction_helps``: preemption and reclaim skip
   the node otherwise), whether other nodes' pods may be behind it (``across_nodes``), the cluster events that may
   clear it (``wakes``), whether it is a shortfall of room (``short_of_room``: explain counts the node's free
   GPUs), and for a rule no pod leaving ever clears, its part of the never-fits sentence (``never``: what would
   change it); ``filter(state, reasons)``, which marks the nodes it refuses (those still ``layout.FIT``) with its
   codes; ``wakes(code)``, usually ``reasons.wakes(self.reasons, code)``. It reads the pod and the snapshot in
   ``state``, and what the cycle is told from outside in ``state.context`` (``interface.CycleContext``); it
   imports no other plugin.
2. ``scheduler/core/registry.py``: the class under its profile name in ``PLUGINS`` (its reasons come with it).
3. ``tests/plugins/test_numa.py``: what a user notices (the node chosen, the ``FailedScheduling`` message).
4. To run by default: ``scheduler/framework/default-profile.yaml`` names it (filters run in the profile's order;
   ``node_rules`` first); else a profile names it.

The texts in Events and conditions, the preemption and reclaim searches, the never-fits sentence
(``scheduler.core.capacity``) and ``gpusched explain`` then read the declarations; no central table changes.
"""
