"""The only package that talks to Kubernetes (kopf, kubernetes_asyncio); each module's first lines say what it owns.

- ``feeds/``: what flows in (the watches, their parsing into the cache and the loop, kopf's handlers, the grouper,
  which optional APIs the cluster serves, NUMA zones);
- ``ports/``: what flows out (the core's ports made real: binding, Events, evictions, nominations, and the PreBinds
  of claims and volumes);
- ``serve/``: what is served (health, metrics, explain, the dashboard, and who may read what);
- here: the operator and ``gpusched run``, the client, configuration, leader election, the status writers.

kubernetes_asyncio's generated client is loaded name by name as it is first used (``scheduler.k8s.generated_client``
says why); that is set up here, so that it is in place before any module of this package imports kubernetes_asyncio.

structlog is first imported here too, without rich (:func:`_import_structlog`).
"""

import sys

from scheduler.k8s import generated_client


def _import_structlog() -> None:
    """Import structlog with rich unimportable meanwhile. structlog's ``dev`` and ``tracebacks`` modules import rich
    when it is installed (it is, through common-expression-language's command line), to print exceptions in boxes:
    half of what importing structlog cost, 50 to 70 ms of CPU at every start of ``gpusched run``. The operator's
    logs print exceptions as plain tracebacks either way (``scheduler.k8s.logs``); rich stays importable afterwards."""
    if "structlog" in sys.modules:
        return
    had, before = "rich" in sys.modules, sys.modules.get("rich")
    sys.modules["rich"] = None  # type: ignore[assignment]  # an import of it now raises ImportError
    try:
        import structlog  # noqa: F401
    finally:
        if had:
            sys.modules["rich"] = before  # type: ignore[assignment]
        else:
            del sys.modules["rich"]


generated_client.install()
_import_structlog()
