"""The dashboard: a read-only web view of the cluster's GPUs, queues and waiting work (issue 30).

This package renders; it never decides and never writes. What it shows comes through a narrow read-only view
(:mod:`scheduler.dashboard.view`): plain frozen records that the operator (``scheduler.k8s.serve.dashboard``) or the
simulator (``scheduler.sim``) fill from the core's state with the core's own numbers (queue statuses as the
Queue's ``status`` shows them, the explain text). :mod:`.cluster_map` reads the cache's arrays into the map;
:mod:`.pages` turns the records into HTML on the server; :mod:`.server` serves the pages over aiohttp with
polling updates and the access checks (:mod:`.access`). It imports no Kubernetes client.
"""
