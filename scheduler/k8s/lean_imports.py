"""The third-party imports of ``gpusched run`` without what they load at import for things it never does on its way
to the first bind: each such part is loaded at its first use instead, or not at all.

Run once by ``scheduler/k8s/__init__.py``, before any module of the package imports these libraries, as
``scheduler.k8s.generated_client`` is. What each part saves is CPU at every start of the operator (measured with
``python -X importtime`` and in turns with ``benchmarks.startup``: docs/performance.md, "Start-up"):

- structlog without rich (:func:`import_structlog`);
- aiohttp's two default TLS contexts without the system's CA certificates until one of them makes a connection
  (:func:`import_aiohttp`): gpusched's client and kopf always pass a context of their own, made from the cluster's
  CA, so aiohttp's defaults serve only a caller that passes none;
- kubernetes_asyncio's ``Configuration`` and ``ApiClient`` modules without urllib3 (for basic auth's header),
  ``multiprocessing.pool`` (for a thread pool an asyncio client never starts) and ``dateutil.parser`` (for dates in
  generated models, which gpusched does not build) until those are first used (:func:`import_client_modules`).

Invariants: every name stays reachable and behaves as before (a deferred CA store is loaded before any connection or
read of it; a deferred module is the real one at its first attribute, a deferred function calls the real one); a
library that was imported already is left as it is; nothing is left in ``sys.modules`` that is not the real module.
"""

from __future__ import annotations

import importlib
import ssl
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def import_structlog() -> None:
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


# --- aiohttp's default TLS contexts -------------------------------------------------------------------------------

#: aiohttp's module-level contexts, made at its import, each loading the system's CA certificates (50 ms each here).
AIOHTTP_DEFAULTS = ("_SSL_CONTEXT_VERIFIED", "_SSL_CONTEXT_UNVERIFIED")

#: What a context is used or read through; a deferred context loads its CA paths before the first of these.
_CONTEXT_USES = ("wrap_bio", "wrap_socket", "get_ca_certs", "cert_store_stats", "load_default_certs")


def import_aiohttp() -> None:
    """Import aiohttp with its default contexts' CA paths loaded at their first use, not at import.

    While ``aiohttp.connector`` is imported, ``SSLContext.set_default_verify_paths`` (what both of its contexts call,
    one through ``ssl.create_default_context``) only notes the context. Afterwards aiohttp's two contexts are made
    to load their paths before their first connection (:func:`_defer_default_paths`), and any other context made
    meanwhile loads them at once, as it asked."""
    if "aiohttp.connector" in sys.modules:
        return
    noted: list[ssl.SSLContext] = []
    own = ssl.SSLContext.__dict__.get("set_default_verify_paths")
    real = ssl.SSLContext.set_default_verify_paths

    def note(context: ssl.SSLContext) -> None:
        noted.append(context)

    ssl.SSLContext.set_default_verify_paths = note  # type: ignore[method-assign,assignment]
    try:
        connector = importlib.import_module("aiohttp.connector")
    finally:
        if own is None:
            del ssl.SSLContext.set_default_verify_paths
        else:
            ssl.SSLContext.set_default_verify_paths = own  # type: ignore[method-assign]
    defaults = {id(getattr(connector, name, None)) for name in AIOHTTP_DEFAULTS}
    for context in noted:
        if id(context) in defaults:
            _defer_default_paths(context, real)
        else:
            real(context)


def _defer_default_paths(context: ssl.SSLContext, load: Callable[[ssl.SSLContext], None]) -> None:
    """Make ``context`` load its default CA paths (``load``) before the first of :data:`_CONTEXT_USES`, once: each
    is shadowed on the instance (an ``SSLContext`` keeps a ``__dict__``) until then, and dropped after."""
    lock = threading.Lock()

    def loaded() -> None:
        with lock:
            if _CONTEXT_USES[0] in vars(context):
                for use in _CONTEXT_USES:
                    vars(context).pop(use, None)
                load(context)

    def first(use: str) -> Callable[..., Any]:
        method = getattr(type(context), use)

        def call(*args: Any, **kwargs: Any) -> Any:
            loaded()
            return method(context, *args, **kwargs)

        call.__name__ = call.__qualname__ = use
        return call

    for use in _CONTEXT_USES:
        setattr(context, use, first(use))


# --- kubernetes_asyncio's configuration and API client ------------------------------------------------------------

#: The modules kubernetes_asyncio's client imports that gpusched never uses on its way to the first bind, and the
#: names taken from each with ``from ... import``, which get a function that imports the module at its first call.
CLIENT_LATER: dict[str, tuple[str, ...]] = {
    "urllib3": (),  # configuration.py: ``urllib3.util.make_headers`` for basic auth
    "multiprocessing.pool": ("ThreadPool",),  # api_client.py: ``ApiClient.pool``, a thread pool for sync calls
    "dateutil.parser": ("parse",),  # api_client.py: dates and times read into generated models
}

#: The modules imported with :data:`CLIENT_LATER` standing in.
CLIENT_MODULES = ("kubernetes_asyncio.client.configuration", "kubernetes_asyncio.client.api_client")


class _Later(types.ModuleType):
    """Stands for a module in those that imported it while it stood in ``sys.modules``: the real module is imported
    at the first attribute asked of it, but for the ``calls`` names, which are functions calling the real one."""

    def __init__(self, name: str, calls: tuple[str, ...]) -> None:
        super().__init__(name, f"{name}, imported at its first use (scheduler.k8s.lean_imports)")
        self._calls = calls

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "_calls":
            raise AttributeError(attr)
        if attr in self._calls:
            return _call_later(self.__name__, attr)
        return getattr(importlib.import_module(self.__name__), attr)


def _call_later(module: str, name: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{module}.{name}, imported at the first call (scheduler.k8s.lean_imports)"
    return call


@contextmanager
def standing_in(later: dict[str, tuple[str, ...]]) -> Iterator[list[str]]:
    """:class:`_Later` in ``sys.modules`` for each module of ``later`` not imported yet, for the block's imports;
    yields their names, and takes them out of ``sys.modules`` after, so any later import gets the real module."""
    placed = [name for name in later if name not in sys.modules]
    for name in placed:
        sys.modules[name] = _Later(name, later[name])
    try:
        yield placed
    finally:
        for name in placed:
            if isinstance(sys.modules.get(name), _Later):
                del sys.modules[name]


def import_client_modules() -> None:
    """Import :data:`CLIENT_MODULES` with :data:`CLIENT_LATER` standing in (nothing when one was imported already)."""
    if any(name in sys.modules for name in CLIENT_MODULES):
        return
    with standing_in(CLIENT_LATER):
        for name in CLIENT_MODULES:
            importlib.import_module(name)
