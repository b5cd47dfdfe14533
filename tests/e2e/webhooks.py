"""Admission webhooks of the workload controllers (JobSet, LeaderWorkerSet), served on loopback for the suite.

In a real cluster a controller's webhook server sits behind a Service, and cert-manager or the controller's own
cert rotator fills in the ``caBundle``. Here the controllers run as local processes that no Service reaches, so:

- a CA and a serving certificate for ``127.0.0.1`` are made with localcluster's PKI helpers, into the directory
  the controller's webhook server reads (``tls.crt`` and ``tls.key``, controller-runtime's default names);
- the module's own webhook kustomization (``config/webhook``, copied into the controllers' cache by
  build-workload-controllers.sh) is rendered with ``kubectl kustomize``, so its patches (the pod webhooks'
  ``objectSelector``) apply as in a release; each configuration gets the project's name prefix, as its
  ``config/default`` gives it (``jobset-``, ``lws-``), and each ``clientConfig.service`` becomes
  ``url: https://127.0.0.1:<port><path>`` with the CA as ``caBundle``.

The configurations must go when the controller stops: their ``failurePolicy`` is ``Fail``, so a webhook with no
server behind it refuses every object it selects (the pod webhooks select only their workload's pods, by label).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.e2e.kube import Kube
from tests.e2e.localcluster import _PKI, APIError, ClusterError

KINDS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
}
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def serving_certificate(cert_dir: Path) -> bytes:
    """Write ``tls.crt``/``tls.key`` for 127.0.0.1 (signed by a CA of their own) into ``cert_dir``; the CA's PEM."""
    pki = _PKI(cert_dir)
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    pki._leaf("tls", "gpusched-e2e-webhook", None, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    return pki.ca_crt.read_bytes()


def configurations(kube: Kube, kustomization: Path, *, prefix: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, renamed with ``prefix`` and pointed at ``https://127.0.0.1:<port>``."""
    rendered = kube.kubectl("kustomize", str(kustomization)).stdout
    ca_bundle = base64.b64encode(ca_pem).decode()
    out = []
    for obj in yaml.safe_load_all(rendered):
        if not obj or obj.get("kind") not in KINDS:
            continue  # the Service: nothing to reach here
        obj["metadata"] = {"name": prefix + obj["metadata"]["name"]}
        for hook in obj["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
        out.append(obj)
    if not out:
        raise ClusterError(f"no webhook configuration in {kustomization}")
    return out


def paths(configs: list[dict[str, Any]]) -> list[str]:
    """Every URL path the configurations call."""
    return sorted({hook["clientConfig"]["url"].split("/", 3)[3] for c in configs for hook in c["webhooks"]})


def wait_serving(
    port: int, ca_pem: bytes, hook_paths: list[str], *, timeout: float, alive: Callable[[], bool], what: str
) -> float:
    """Wait until the server on ``port`` answers every path over TLS verified by ``ca_pem``; the seconds it took.

    The handshake alone is not enough: controller-runtime starts serving before the controller has registered its
    handlers, and a path with no handler yet answers 404, which the API server would take as a failed call.
    """
    started = time.monotonic()
    context = ssl.create_default_context(cadata=ca_pem.decode())
    last = "nothing yet"
    while True:
        if not alive():
            raise ClusterError(f"{what} exited before its webhook server was up (last: {last})")
        missing = []
        for path in hook_paths:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
            try:
                conn.request("POST", "/" + path, body=b"{}", headers={"Content-Type": "application/json"})
                status = conn.getresponse().status
            except OSError as exc:
                status, last = 0, repr(exc)
            finally:
                conn.close()
            if status in (0, 404):
                missing.append(path)
                last = last if status == 0 else f"/{path}: 404"
        if not missing:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise ClusterError(
                f"{what}'s webhook server on 127.0.0.1:{port} not serving {missing} after {timeout:.0f}s (last: {last})"
            )
        time.sleep(0.2)


def register(kube: Kube, configs: list[dict[str, Any]]) -> None:
    """Create (or replace) the configurations: from now on the API server calls the controller."""
    kube.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": configs}),
    )


def wait_admitted(
    kube: Kube,
    path: str,
    probe: dict[str, Any],
    mutated: Callable[[dict[str, Any]], bool],
    *,
    timeout: float,
    what: str,
) -> float:
    """Wait until the API server calls the newly registered webhooks; the seconds it took.

    It picks up webhook configurations from a watch, so a workload created right after :func:`register` can slip
    past them. A dry-run create of ``probe`` at ``path`` runs the admission chain (the webhooks declare
    ``sideEffects: None``) without storing anything; ``mutated`` tells from the answer that the defaulting
    webhook ran.
    """
    started = time.monotonic()
    last: object = None
    while True:
        try:
            answer = kube.request("POST", path, probe, query={"dryRun": "All"})
            if mutated(answer):
                return time.monotonic() - started
            last = answer.get("spec")
        except APIError as exc:
            last = exc
        if time.monotonic() - started > timeout:
            raise ClusterError(f"the API server did not call {what}'s webhooks within {timeout:.0f}s (last: {last})")
        time.sleep(0.2)


def unregister(kube: Kube, configs: list[dict[str, Any]]) -> None:
    """Delete the configurations; ones already gone are fine."""
    for obj in configs:
        try:
            kube.request("DELETE", f"{ADMISSION}/{KINDS[obj['kind']]}/{obj['metadata']['name']}")
        except APIError as exc:
            if exc.status != 404:
                raise


def stop_controllers(
    kube: Kube, procs: list[subprocess.Popen[bytes]], registered: list[dict[str, Any]], *, tmp: Path, what: str
) -> None:
    """Unregister the controllers' webhook configurations first (with no server behind them they would refuse every
    object they select), then stop the controllers and remove their directory ``tmp`` (kept, and said so, under
    ``GPUSCHED_E2E_KEEP=1``)."""
    unregister(kube, registered)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if kube.local is not None:
            kube.local.untrack_process(proc.pid)
    if os.environ.get("GPUSCHED_E2E_KEEP") != "1":
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"\n[e2e] keeping {what}'s logs and certificates in {tmp}")
