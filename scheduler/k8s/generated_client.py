"""kubernetes_asyncio's generated client, loaded name by name as gpusched first asks for each, not all at import.

Why: any import of kubernetes_asyncio runs its packages' ``__init__``, and those import the whole generated client,
some 70 API classes and 700 model classes, at every start of ``gpusched run`` (profiled with ``python -X
importtime``: docs/operator.md, "Start-up after a restart"). gpusched calls six of the API classes, and no model on
its way to the first bind: every call reads the raw answer (``scheduler.k8s.client``).

:func:`install` (run by ``scheduler/k8s/__init__.py``, so before any module of the package imports kubernetes_asyncio)
puts the four package modules that list the client, ``kubernetes_asyncio``, ``.client``, ``.client.api`` and
``.client.models``, in ``sys.modules`` without running their ``__init__``, each with a module ``__getattr__`` (PEP
562) that imports a name's own submodule, as the ``__init__`` lists it, when the name is first asked for: ``from
kubernetes_asyncio import client; client.CoreV1Api`` imports ``client/api/core_v1_api.py`` and no other API, and an
answer deserialised into a model imports that model. Invariants kept here:

- Every name the packages offer stays reachable as before, as the same object: a submodule is imported alone, and a
  name their ``__init__`` neither lists nor has as a submodule (``__all__``, ``__version__``) runs that whole
  ``__init__`` once, in the module: the eager import it stood for.
- Nothing changes when kubernetes_asyncio was imported already (a tool or a test that imported it first) or does not
  lay out its packages as expected: :func:`install` then leaves the import to Python.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import threading
import types
from typing import Any

#: The packages whose ``__init__`` imports the generated client, parents first.
PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)

#: ``from kubernetes_asyncio.x.y import Name`` and ``import kubernetes_asyncio.x as x``: the only kinds of line that
#: import anything in those ``__init__`` files.
_FROM_IMPORT = re.compile(r"^from (kubernetes_asyncio(?:\.\w+)+) import (\w+)\s*$", re.MULTILINE)
_IMPORT_AS = re.compile(r"^import (kubernetes_asyncio(?:\.\w+)+) as (\w+)\s*$", re.MULTILINE)

_lock = threading.RLock()


def install() -> bool:
    """Put the lazy package modules in place (see the module notes); True if they were put there now."""
    with _lock:
        if any(name in sys.modules for name in PACKAGES):
            return False
        made: dict[str, types.ModuleType] = {}
        for name in PACKAGES:
            parent = made.get(name.rpartition(".")[0])
            search = None if parent is None else list(getattr(parent, "__path__", []))
            spec = importlib.machinery.PathFinder.find_spec(name, search)
            if spec is None or spec.origin is None or spec.loader is None or spec.submodule_search_locations is None:
                return False
            try:
                with open(spec.origin, encoding="utf-8") as source:
                    text = source.read()
            except OSError:
                return False
            module = importlib.util.module_from_spec(spec)
            module.__dict__["__getattr__"] = _lazy_names(module, spec, _listed(text))
            made[name] = module
            if parent is not None:
                setattr(parent, name.rpartition(".")[2], module)
        sys.modules.update(made)
        return True


def _listed(text: str) -> dict[str, tuple[str, str]]:
    """What an ``__init__`` imports: each name -> (the module it comes from, the attribute there; "" for the module
    itself)."""
    names = {name: (source, name) for source, name in _FROM_IMPORT.findall(text)}
    names.update({alias: (source, "") for source, alias in _IMPORT_AS.findall(text)})
    return names


def _lazy_names(
    module: types.ModuleType, spec: importlib.machinery.ModuleSpec, listed: dict[str, tuple[str, str]]
) -> Any:
    ran = False

    def lazy(name: str) -> Any:
        nonlocal ran
        where = listed.get(name)
        if where is not None:
            source, attribute = where
            value: Any = importlib.import_module(source)
            if attribute:
                value = getattr(value, attribute)
            setattr(module, name, value)  # found once: the next lookups do not come here
            return value
        if not name.startswith("__") and importlib.machinery.PathFinder.find_spec(
            f"{module.__name__}.{name}", list(getattr(module, "__path__", []))
        ):
            # A submodule (``from kubernetes_asyncio.client import rest``): imported as Python would, alone.
            return importlib.import_module(f"{module.__name__}.{name}")
        with _lock:
            if not ran and spec.loader is not None:
                ran = True
                spec.loader.exec_module(module)  # the eager ``__init__``, once: every name it defines
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    return lazy
