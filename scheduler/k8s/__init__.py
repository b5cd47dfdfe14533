"""The only package that talks to Kubernetes (kopf, kubernetes_asyncio); each module's first lines say what it owns.

- ``feeds/``: what flows in (the watches, their parsing into the cache and the loop, kopf's handlers, the grouper,
  which optional APIs the cluster serves, NUMA zones);
- ``ports/``: what flows out (the core's ports made real: binding, Events, evictions, nominations, and the PreBinds
  of claims and volumes);
- ``serve/``: what is served (health, metrics, explain, the dashboard, and who may read what);
- here: the operator and ``gpusched run``, the client, configuration, leader election, the status writers.

kubernetes_asyncio's generated client is loaded name by name as it is first used (``scheduler.k8s.generated_client``
says why); that is set up here, so that it is in place before any module of this package imports kubernetes_asyncio.

Some third-party imports are made here too, lighter than they would be alone (``scheduler.k8s.lean_imports``):
structlog without rich, aiohttp without its default contexts' CA certificates, kubernetes_asyncio's client without
the modules it imports for what gpusched never does.
"""

from scheduler.k8s import generated_client, lean_imports

generated_client.install()
lean_imports.import_structlog()
lean_imports.import_aiohttp()
lean_imports.import_client_modules()
