"""The operator's third-party imports made lighter (scheduler.k8s.lean_imports): what is deferred is not loaded by
``gpusched run``'s imports, and is there, as it was, at its first use.

The tests of the whole import run a fresh interpreter: this one has imported aiohttp and kubernetes_asyncio already.
"""

from __future__ import annotations

import importlib
import ssl
import sys

from scheduler.k8s import lean_imports
from tests.k8s.test_generated_client import fresh_interpreter


def test_the_operator_loads_no_ca_store_urllib3_thread_pool_or_date_parser_until_they_are_used() -> None:
    code = (
        "import json, ssl, sys\n"
        "from scheduler import cli\n"
        "cli.build_parser('run')\n"
        "from scheduler.k8s import run\n"
        "from aiohttp import connector\n"
        "from kubernetes_asyncio.client import api_client, configuration\n"
        "deferred = ['urllib3', 'multiprocessing.pool', 'dateutil.parser']\n"
        "loaded = [name for name in deferred if name in sys.modules]\n"
        "verified, unverified = connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED\n"
        "before = [len(vars(verified)), len(vars(unverified))]\n"
        "verified.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname='example.org')\n"
        "stats = [verified.cert_store_stats(), unverified.cert_store_stats(),"
        " ssl.create_default_context().cert_store_stats()]\n"
        "pool = api_client.ThreadPool(1)\n"
        "answer = pool.apply(sum, ([1, 2],))\n"
        "pool.close()\n"
        "print(json.dumps({\n"
        "    'loaded': loaded, 'before': before, 'stats': stats, 'left': sorted(vars(verified)),\n"
        "    'verify': [verified.verify_mode == ssl.CERT_REQUIRED, verified.check_hostname,"
        " unverified.verify_mode == ssl.CERT_NONE],\n"
        "    'pool': answer, 'date': api_client.parse('2026-01-02T03:04:05Z').isoformat(),\n"
        "    'auth': configuration.urllib3.util.make_headers(basic_auth='a:b'),\n"
        "    'modules': [type(sys.modules[name]).__name__ for name in deferred],\n"
        "}))\n"
    )
    found = fresh_interpreter(code)
    assert found["loaded"] == []
    # Both contexts wait with their uses shadowed on the instance, no CA loaded yet.
    assert found["before"] == [len(lean_imports._CONTEXT_USES)] * 2
    verified_stats, unverified_stats, default_stats = found["stats"]  # type: ignore[misc]
    assert verified_stats == default_stats  # loaded before its first connection, all of the system's store
    assert unverified_stats == default_stats  # its first read loads them too, as aiohttp asked
    assert found["left"] == []  # the shadows are gone once loaded
    assert found["verify"] == [True, True, True]  # aiohttp's own settings are untouched
    assert found["pool"] == 3
    assert found["date"] == "2026-01-02T03:04:05+00:00"
    assert found["auth"] == {"authorization": "Basic YTpi"}
    assert found["modules"] == ["module", "module", "module"]  # the real ones, once used


def test_a_deferred_context_loads_its_paths_once_before_its_first_use() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    loads: list[ssl.SSLContext] = []
    lean_imports._defer_default_paths(context, loads.append)
    assert loads == []
    assert context.cert_store_stats()["x509"] == 0  # what it holds: nothing was loaded by the fake
    assert loads == [context]
    context.get_ca_certs()
    context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.org")
    assert loads == [context]  # once
    assert not any(use in vars(context) for use in lean_imports._CONTEXT_USES)


def test_a_module_standing_in_is_the_real_one_at_first_use_and_never_left_in_sys_modules() -> None:
    name = "colorsys"  # a small standard module nothing here imports
    was = sys.modules.pop(name, None)
    try:
        with lean_imports.standing_in({name: ("rgb_to_hsv",)}) as placed:
            stand_in = importlib.import_module(name)
            to_hsv = stand_in.rgb_to_hsv
            assert placed == [name]
            assert type(stand_in).__name__ == "_Later"
        assert name not in sys.modules  # nothing imported it yet: the next import is the real one
        assert to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)  # the real function, imported at this call
        assert stand_in.hls_to_rgb(0.0, 0.5, 1.0) == (1.0, 0.0, 0.0)
        assert type(sys.modules[name]).__name__ == "module"
        with lean_imports.standing_in({name: ()}) as placed:
            assert placed == []  # imported already: left as it is
    finally:
        if was is not None:
            sys.modules[name] = was
