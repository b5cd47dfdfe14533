"""A throw-away local Kubernetes control plane for gpusched end-to-end tests.

Runs real etcd, kube-apiserver, kube-controller-manager (and optionally
kube-scheduler) plus kwok, which plays the kubelet for fake nodes so that pods
bound to them go Running.  No containers, no kubelet, no network beyond
127.0.0.1.

Binaries come from ``tests/e2e/build-controlplane.sh`` (built once into a cache
outside the repository); set ``GPUSCHED_E2E_BIN`` to use a prepared directory.

Dependencies: the standard library and ``cryptography``.

Usage::

    from tests.e2e.localcluster import LocalCluster

    with LocalCluster() as c:
        c.create_fake_node("gpu-0", gpus=8)
        c.kubectl("get", "nodes", "-o", "wide")
        c.request("POST", "/api/v1/namespaces/default/pods/p/binding", body)
        c.restart_apiserver()

Everything (processes, temp dir) is torn down on exit, also when the body
raises; the process logs are then printed to stderr.  Set
``GPUSCHED_E2E_KEEP=1`` to keep the temp dir for inspection.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-controlplane.sh"

#: Annotation kwok is told to manage (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
GPU_RESOURCE = "nvidia.com/gpu"

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)


class ClusterError(RuntimeError):
    """The local control plane failed to start, or a helper call failed."""


class ProcessExited(ClusterError):
    """A control-plane process died; waiting longer will not help."""


class APIError(ClusterError):
    """Non-2xx answer from the API server; ``status`` and ``body`` are set."""

    def __init__(self, method: str, path: str, status: int, body: str):
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")


# --------------------------------------------------------------------------
# binaries


def ensure_binaries(bin_dir: str | os.PathLike | None = None) -> Path:
    """Return the directory holding the control-plane binaries.

    Order: the ``bin_dir`` argument, ``$GPUSCHED_E2E_BIN``, else run
    ``build-controlplane.sh`` (a fast no-op when the cache is warm).
    """
    chosen = bin_dir or os.environ.get("GPUSCHED_E2E_BIN")
    if chosen:
        path = Path(chosen)
    else:
        if not BUILD_SCRIPT.exists():
            raise ClusterError(f"missing {BUILD_SCRIPT}")
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=None,  # progress goes straight to the user's stderr
            text=True,
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise ClusterError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}); see its messages above")
        path = Path(lines[-1])
    missing = [b for b in BINARIES if not os.access(path / b, os.X_OK)]
    if missing:
        raise ClusterError(f"binaries {missing} missing from {path}")
    return path


def cached_binaries() -> Path | None:
    """A complete cached binary directory for the pinned versions, found without Go and without building.

    ``$GPUSCHED_E2E_BIN`` if set; else the newest complete ``bin-<tag>`` under the cache root whose versions
    match ``controlplane/go.mod`` (the hash part of the tag is not recomputed here, which needs the script).
    """
    if os.environ.get("GPUSCHED_E2E_BIN"):
        return Path(os.environ["GPUSCHED_E2E_BIN"])
    versions: dict[str, str] = {}
    for line in (HERE / "controlplane" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("v"):
            versions.setdefault(parts[0], parts[1])
    prefix = "bin-k8s-{}-etcd-{}-kwok-{}-".format(
        versions.get("k8s.io/kubernetes"), versions.get("go.etcd.io/etcd/server/v3"), versions.get("sigs.k8s.io/kwok")
    )
    root = Path(os.environ.get("GPUSCHED_E2E_CACHE") or Path.home() / ".cache" / "gpusched")
    complete = [
        d
        for d in root.glob(prefix + "*")
        if (d / "kwok-stages.yaml").is_file() and all(os.access(d / b, os.X_OK) for b in BINARIES)
    ]
    return max(complete, key=lambda d: d.stat().st_mtime) if complete else None


#: A kube-apiserver of the older minor (a path), instead of the one ``build-controlplane.sh older`` caches.
OLDER_APISERVER_ENV = "GPUSCHED_E2E_OLDER_APISERVER"


def older_apiserver_version() -> str:
    """The Kubernetes version ``controlplane-older/go.mod`` pins (the older minor's kube-apiserver)."""
    for line in (HERE / "controlplane-older" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v"):
            return parts[1]
    raise ClusterError("controlplane-older/go.mod pins no k8s.io/kubernetes version")


def cached_older_apiserver() -> Path | None:
    """The older minor's kube-apiserver, found without Go and without building: ``$GPUSCHED_E2E_OLDER_APISERVER``
    if set, else the newest ``bin-k8s-apiserver-<version>-<hash>/kube-apiserver`` in the cache that
    ``build-controlplane.sh older`` fills."""
    given = os.environ.get(OLDER_APISERVER_ENV)
    if given:
        return Path(given)
    root = Path(os.environ.get("GPUSCHED_E2E_CACHE") or Path.home() / ".cache" / "gpusched")
    built = [
        d / "kube-apiserver"
        for d in root.glob(f"bin-k8s-apiserver-{older_apiserver_version()}-*")
        if (d / "BUILD_INFO").is_file() and os.access(d / "kube-apiserver", os.X_OK)
    ]
    return max(built, key=lambda b: b.stat().st_mtime) if built else None


# --------------------------------------------------------------------------
# small utilities


#: Ports :func:`free_port` has handed out in this process: the kernel may give a port just closed to the next
#: ``bind(0)`` (etcd and kube-apiserver once got the same one, and the apiserver failed with "address already in
#: use"), so none is handed out twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process has not handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    max_interval: float = 1.0,
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Exceptions from the predicate count as "not yet"; the last one is
    mentioned in the timeout error.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ProcessExited:
            raise
        except Exception as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval)


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


# A separate watchdog process cleans up if the Python process dies without
# running stop() (SIGKILL, OOM, a hard CI timeout).  It reads commands on its
# stdin; EOF means the parent is gone: it then kills every process group it
# was told about and removes the registered directories.  (prctl's
# PR_SET_PDEATHSIG is not used: it is per-thread and not honoured everywhere.)
_WATCHDOG_CODE = r"""
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups, dirs = set(), set()
for line in sys.stdin:
    cmd, _, arg = line.rstrip("\n").partition(" ")
    if cmd == "add":
        groups.add(int(arg))
    elif cmd == "del":
        groups.discard(int(arg))
    elif cmd == "dir":
        dirs.add(arg)
    elif cmd == "exit":
        sys.exit(0)
def alive(g):
    try:
        os.killpg(g, 0)
        return True
    except OSError:
        return False
for g in groups:
    try:
        os.killpg(g, signal.SIGTERM)
    except OSError:
        pass
deadline = time.time() + 3
while time.time() < deadline and any(alive(g) for g in groups):
    time.sleep(0.1)
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
deadline = time.time() + 10
while time.time() < deadline and any(alive(g) for g in groups):
    time.sleep(0.1)
for attempt in range(3):
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    if not any(os.path.exists(d) for d in dirs):
        break
    time.sleep(0.5)
"""


class _Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )

    def send(self, cmd: str) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            assert self.popen.stdin is not None
            self.popen.stdin.write(cmd + "\n")
            self.popen.stdin.flush()

    def close(self) -> None:
        self.send("exit")
        with contextlib.suppress(Exception):
            assert self.popen.stdin is not None
            self.popen.stdin.close()
        with contextlib.suppress(Exception):
            self.popen.wait(timeout=5)


# --------------------------------------------------------------------------
# certificates


class _PKI:
    """CA, apiserver serving cert, admin client cert, service-account key."""

    def __init__(self, directory: Path):
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        self._not_before = now - datetime.timedelta(hours=1)
        self._not_after = now + datetime.timedelta(days=7)

        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpusched-e2e-ca")])
        self.ca_cert = (
            self._builder(ca_name, ca_name, self.ca_key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca_crt = self._write_cert("ca.crt", self.ca_cert)

        sans = [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.DNSName("kubernetes.default.svc.cluster.local"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
        ]
        self.apiserver_crt, self.apiserver_key = self._leaf(
            "apiserver", "kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, sans
        )
        self.admin_crt, self.admin_key = self._leaf(
            "admin", "gpusched-e2e-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, None
        )

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = self._write(
            "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
        )
        self.sa_pub = self._write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )

    def _builder(self, subject, issuer, public_key):
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
        )

    def _leaf(self, stem, cn, org, usage, sans):
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        builder = (
            self._builder(x509.Name(attrs), self.ca_cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        crt = self._write_cert(f"{stem}.crt", cert)
        keyfile = self._write(
            f"{stem}.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return crt, keyfile

    def _write_cert(self, name, cert) -> Path:
        return self._write(name, cert.public_bytes(serialization.Encoding.PEM))

    def _write(self, name, data: bytes) -> Path:
        path = self.dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return path


# --------------------------------------------------------------------------
# processes


class _Proc:
    """One child process with its own log file and process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        watchdog: _Watchdog | None = None,
    ):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.watchdog = watchdog
        self.popen: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        if self.alive():
            raise ClusterError(f"{self.name} is already running")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # own process group: killpg gets all of it
            )
        if self.watchdog is not None:
            self.watchdog.send(f"add {self.popen.pid}")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def stop(self, timeout: float = 10.0, kill: bool = False) -> None:
        p = self.popen
        if p is None:
            return
        if p.poll() is None:
            sig = signal.SIGKILL if kill else signal.SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        # anything left in its process group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        if self.watchdog is not None:
            self.watchdog.send(f"del {p.pid}")

    def check_running(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ProcessExited(
                f"{self.name} exited with code {self.popen.returncode}; log {self.log_path}:\n"
                + _tail(self.log_path, 40)
            )


_LIVE_CLUSTERS: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for cluster in list(_LIVE_CLUSTERS):
        with contextlib.suppress(Exception):
            cluster.stop()


# --------------------------------------------------------------------------
# the cluster


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kwok on 127.0.0.1.

    Parameters
    ----------
    bin_dir:
        Directory with the binaries; default see :func:`ensure_binaries`.
    workdir:
        Where certs, data and logs go; default a fresh temp dir that is
        removed on stop (unless ``keep`` or ``$GPUSCHED_E2E_KEEP=1``).
    with_scheduler:
        Also run the stock kube-scheduler (schedulerName ``default-scheduler``), in its default configuration.
    scheduler_qps, scheduler_burst:
        Run kube-scheduler from a KubeSchedulerConfiguration whose ``clientConnection`` raises the client's QPS
        and burst (the defaults are 50 and 100), everything else default. Needs ``with_scheduler``.
    defer_scheduler:
        Build kube-scheduler's command line but leave it stopped until :meth:`start_scheduler` (to let work pile
        up first, as the throughput benchmark's backlog mode does).
    with_controller_manager, with_kwok:
        Turn those components off (both on by default).
    service_account_admission:
        Keep the ServiceAccount admission plugin.  Off by default: with it,
        creating a pod in a namespace fails until the controller manager has
        created that namespace's ``default`` ServiceAccount, a pointless race
        for scheduler tests.
    disabled_apis:
        Group versions the API server does not serve (``resource.k8s.io/v1``: a cluster as it was before Kubernetes
        1.34), through ``--runtime-config=<group version>=false``. Without ``resource.k8s.io/v1`` a 1.36 API server
        is never ready with the Node authorizer (it watches ResourceSlices while DRA's feature gate is on, locked on
        since 1.35): pass ``node_authorizer=False`` too.
    node_authorizer:
        Authorize with ``Node,RBAC`` (default), else RBAC only (kwok's nodes use the admin credentials anyway).
    apiserver_binary:
        A kube-apiserver to run instead of ``bin_dir``'s: an older minor (:func:`cached_older_apiserver`), with
        ``bin_dir``'s etcd, kwok and kubectl. Pass ``with_controller_manager=False`` too: ``bin_dir``'s
        kube-controller-manager would be newer than that API server (outside Kubernetes' version skew policy); new
        nodes then keep the ``node.kubernetes.io/not-ready`` taint until the test takes it off.
    extra_apiserver_args, extra_controller_manager_args, extra_kwok_args,
    extra_scheduler_args:
        Appended to the command lines.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike | None = None,
        workdir: str | os.PathLike | None = None,
        keep: bool | None = None,
        with_scheduler: bool = False,
        with_controller_manager: bool = True,
        with_kwok: bool = True,
        service_account_admission: bool = False,
        disabled_apis: Iterable[str] = (),
        node_authorizer: bool = True,
        apiserver_binary: str | os.PathLike | None = None,
        extra_apiserver_args: Iterable[str] = (),
        extra_controller_manager_args: Iterable[str] = (),
        extra_kwok_args: Iterable[str] = (),
        extra_scheduler_args: Iterable[str] = (),
        scheduler_qps: float | None = None,
        scheduler_burst: int | None = None,
        defer_scheduler: bool = False,
        startup_timeout: float = 120.0,
        log_tail_lines: int = 60,
        verbose: bool = True,
    ):
        self._bin_dir_arg = bin_dir
        self._workdir_arg = Path(workdir) if workdir else None
        self.keep = keep if keep is not None else os.environ.get("GPUSCHED_E2E_KEEP") == "1"
        self.with_scheduler = with_scheduler
        self.with_controller_manager = with_controller_manager
        self.with_kwok = with_kwok
        self.service_account_admission = service_account_admission
        self.disabled_apis = list(disabled_apis)
        self.node_authorizer = node_authorizer
        self.apiserver_binary = Path(apiserver_binary) if apiserver_binary is not None else None
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self.extra_kwok_args = list(extra_kwok_args)
        self._canaries = 0  # kwok's canary pods so far (see _wait_kwok_back)
        self.extra_scheduler_args = list(extra_scheduler_args)
        if (scheduler_qps is not None or scheduler_burst is not None) and not with_scheduler:
            raise ClusterError("scheduler_qps/scheduler_burst need with_scheduler=True")
        self.scheduler_qps = scheduler_qps
        self.scheduler_burst = scheduler_burst
        self.defer_scheduler = defer_scheduler
        self.startup_timeout = startup_timeout
        self.log_tail_lines = log_tail_lines
        self.verbose = verbose

        self.bin_dir: Path | None = None
        self.workdir: Path | None = None
        self.pki: _PKI | None = None
        self.ports: dict[str, int] = {}
        self.procs: dict[str, _Proc] = {}
        self.timings: dict[str, float] = {}
        self._ssl_ctx: ssl.SSLContext | None = None
        self._watchdog: _Watchdog | None = None
        self._owns_workdir = False
        self._started = False
        self._stopped = False
        self._tracked: set[int] = set()

    # ---- lifecycle ------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not isinstance(exc, KeyboardInterrupt):
            self.dump_logs()
        self.stop()

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[localcluster] {msg}", file=sys.stderr, flush=True)

    def start(self) -> LocalCluster:
        if self._started:
            raise ClusterError("LocalCluster.start() called twice")
        self._started = True
        _LIVE_CLUSTERS.add(self)
        self._watchdog = _Watchdog()
        t0 = time.monotonic()
        try:
            self.bin_dir = ensure_binaries(self._bin_dir_arg)
            if self._workdir_arg:
                self.workdir = self._workdir_arg
                self.workdir.mkdir(parents=True, exist_ok=True)
            else:
                self.workdir = Path(tempfile.mkdtemp(prefix="gpusched-e2e-"))
                self._owns_workdir = True
                if not self.keep:
                    self._watchdog.send(f"dir {self.workdir}")
            (self.workdir / "logs").mkdir(exist_ok=True)
            self._log(f"workdir {self.workdir}")

            t = time.monotonic()
            self.pki = _PKI(self.workdir / "pki")
            self.timings["certs"] = time.monotonic() - t
            for name in ("etcd", "etcd_peer", "apiserver", "controller_manager", "kwok", "scheduler"):
                self.ports[name] = free_port()
            self._write_kubeconfig()
            self._build_procs()

            t = time.monotonic()
            self.procs["etcd"].start()
            wait_for(self._etcd_healthy, self.startup_timeout, "etcd /health", interval=0.05)
            self.timings["etcd"] = time.monotonic() - t

            t = time.monotonic()
            self.procs["kube-apiserver"].start()
            self._wait_apiserver_ready(self.startup_timeout)
            self.timings["kube-apiserver"] = time.monotonic() - t

            t = time.monotonic()
            for name in ("kube-controller-manager", "kwok", "kube-scheduler"):
                if name in self.procs and not (name == "kube-scheduler" and self.defer_scheduler):
                    self.procs[name].start()
            if "kube-controller-manager" in self.procs:
                wait_for(
                    lambda: self._component_healthy("kube-controller-manager"),
                    self.startup_timeout,
                    "kube-controller-manager /healthz",
                )
            if "kube-scheduler" in self.procs and not self.defer_scheduler:
                wait_for(
                    lambda: self._component_healthy("kube-scheduler"),
                    self.startup_timeout,
                    "kube-scheduler /healthz",
                )
            if "kwok" in self.procs:
                wait_for(lambda: self._component_healthy("kwok"), self.startup_timeout, "kwok /healthz")
            self.timings["components"] = time.monotonic() - t
            # The apiserver's own bootstrap (default namespace, priority
            # classes, RBAC) is done once /readyz is ok; make sure "default"
            # is really there for the caller.
            wait_for(
                lambda: self.request("GET", "/api/v1/namespaces/default"),
                self.startup_timeout,
                "namespace default",
            )
            self.timings["total"] = time.monotonic() - t0
            self._log(
                f"control plane up in {self.timings['total']:.1f}s at {self.server} (kubeconfig {self.kubeconfig})"
            )
        except BaseException:
            self.dump_logs()
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every process (reverse start order) and remove the temp dir."""
        if self._stopped:
            return
        self._stopped = True
        for pid in sorted(self._tracked):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self._tracked.clear()
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            proc = self.procs.get(name)
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop(timeout=5.0)
        _LIVE_CLUSTERS.discard(self)
        if self._watchdog is not None:
            self._watchdog.close()
        if self.workdir is not None and self._owns_workdir:
            if self.keep:
                self._log(f"keeping {self.workdir}")
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def dump_logs(self, lines: int | None = None, file=None) -> None:
        """Print the tail of every process log (done automatically on failure)."""
        lines = lines or self.log_tail_lines
        out = file or sys.stderr
        for name, proc in self.procs.items():
            if not proc.log_path.exists():
                continue
            state = "running" if proc.alive() else f"exited {proc.popen.returncode if proc.popen else '-'}"
            print(
                f"\n----- {name} ({state}) last {lines} lines of {proc.log_path} -----",
                file=out,
            )
            print(_tail(proc.log_path, lines), file=out)
        out.flush()

    def start_scheduler(self, timeout: float | None = None) -> float:
        """Start a deferred kube-scheduler (``defer_scheduler=True``); wait for /healthz; return the seconds."""
        if "kube-scheduler" not in self.procs:
            raise ClusterError("no kube-scheduler in this cluster: pass with_scheduler=True")
        t = time.monotonic()
        self.procs["kube-scheduler"].start()
        wait_for(
            lambda: self._component_healthy("kube-scheduler"),
            timeout or self.startup_timeout,
            "kube-scheduler /healthz",
        )
        return time.monotonic() - t

    def track_process(self, pid: int) -> None:
        """Kill the process group ``pid`` (a scheduler under test) with the cluster: on stop(), or by the watchdog
        if Python dies first."""
        self._tracked.add(pid)
        if self._watchdog is not None:
            self._watchdog.send(f"add {pid}")

    def untrack_process(self, pid: int) -> None:
        self._tracked.discard(pid)
        if self._watchdog is not None:
            self._watchdog.send(f"del {pid}")

    def check_processes(self) -> None:
        """Raise ClusterError if any component has died."""
        for proc in self.procs.values():
            proc.check_running()

    # ---- the controller manager paused ----------------------------------

    @contextlib.contextmanager
    def controllers_paused(self) -> Iterator[None]:
        """kube-controller-manager stopped (SIGSTOP) inside the block and continued (SIGCONT) after it, whatever
        happens: meanwhile no ReplicaSet makes a pod and no PodDisruptionBudget's status is recomputed (the API
        server still counts an eviction in it)."""
        proc = self.procs["kube-controller-manager"]
        assert proc.popen is not None and proc.alive(), "kube-controller-manager is not running"
        self._log("pausing kube-controller-manager (SIGSTOP)")
        os.killpg(proc.popen.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGCONT)
            self._log("kube-controller-manager continued (SIGCONT)")

    # ---- API server restarts -------------------------------------------

    def stop_apiserver(self, kill: bool = False, grace: float = 5.0) -> None:
        """Stop kube-apiserver: SIGTERM (or SIGKILL with ``kill=True``).

        It stops listening at once on SIGTERM, but with clients holding
        watches its graceful shutdown runs up to --request-timeout (60s), so
        after ``grace`` seconds it is SIGKILLed.
        """
        self.procs["kube-apiserver"].stop(timeout=grace, kill=kill)

    def start_apiserver(self, timeout: float | None = None) -> float:
        """Start kube-apiserver again on the same port; wait for /readyz, then for kwok to serve again
        (:meth:`_wait_kwok_back`).

        Returns the seconds until the API server was ready.
        """
        t = time.monotonic()
        self.procs["kube-apiserver"].start()
        self._wait_apiserver_ready(timeout or self.startup_timeout)
        elapsed = time.monotonic() - t
        if "kwok" in self.procs:
            self._wait_kwok_back()
        return elapsed

    def _wait_kwok_back(self, timeout: float = 120.0) -> None:
        """Return once kwok makes a pod Running on a node created after the restart.

        kwok's clients wait out a backoff after the API server comes back (client-go's reflectors: up to 30 s,
        longer after restarts close together), and while its cache of node Leases has not caught up it drops
        any pod on a node whose Lease it does not see itself holding ("Skip pod", reason "read only"), for
        good: it reads a pod again only when the pod changes. So a test that made a node and a pod just after
        a restart saw the pod Pending for ever (tests/e2e/test_simulate_snapshot_e2e.py in CI; reproduced by
        restarting the API server a few times and making a node and a pod after each). A canary node and pod
        are made here, the pod touched every 2 s (a change kwok reads again) until it runs: then kwok's node,
        Lease and pod watches all serve again, and the canary is deleted. The canary node is cordoned and
        tainted, so no scheduler places a pod there meanwhile.
        """
        self._canaries += 1
        node, ns = f"kwok-canary-{self._canaries}", "default"
        pod_path = f"/api/v1/namespaces/{ns}/pods/{node}"
        t = time.monotonic()
        self.create_fake_node(
            node,
            gpus=0,
            cpu="1",
            memory="1Gi",
            labels={"e2e.gpusched.io/canary": "true"},
            taints=[{"key": "e2e.gpusched.io/canary", "effect": "NoSchedule"}],
            wait_ready=False,
        )
        self.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"spec": {"unschedulable": True}},
            content_type="application/merge-patch+json",
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": node, "namespace": ns},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "canary"}],
                "terminationGracePeriodSeconds": 0,
            },
        }
        self.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        touches = 0
        try:
            deadline = time.monotonic() + timeout
            touch_at = time.monotonic() + 2.0
            while self.request("GET", pod_path).get("status", {}).get("phase") != "Running":
                if time.monotonic() > deadline:
                    raise ClusterError(f"kwok did not run a pod within {timeout:.0f}s of the API server's restart")
                time.sleep(0.2)
                if time.monotonic() < touch_at:
                    continue
                touch_at = time.monotonic() + 2.0
                touches += 1
                self.request(
                    "PATCH",
                    pod_path,
                    {"metadata": {"labels": {"e2e.gpusched.io/touched": str(touches)}}},
                    content_type="application/merge-patch+json",
                )
        finally:
            with contextlib.suppress(Exception):
                self.request("DELETE", pod_path, {"gracePeriodSeconds": 0})
            with contextlib.suppress(Exception):
                self.request("DELETE", f"/api/v1/nodes/{node}")
        self._log(f"kwok back {time.monotonic() - t:.1f}s after the API server (canary pod touched {touches} times)")

    def restart_apiserver(
        self,
        kill: bool = False,
        downtime: float = 0.0,
        timeout: float | None = None,
        grace: float = 5.0,
    ) -> float:
        """Stop kube-apiserver, stay down ``downtime`` seconds, start it again.

        etcd and the clients (controller manager, kwok, schedulers) keep
        running and must reconnect; it returns once kwok serves again.  Returns
        the seconds the API server was unavailable (stop to ready).
        """
        t = time.monotonic()
        self._log(f"restarting kube-apiserver ({'SIGKILL' if kill else 'SIGTERM'})")
        self.stop_apiserver(kill=kill, grace=grace)
        if downtime:
            time.sleep(downtime)
        down = time.monotonic() - t
        elapsed = down + self.start_apiserver(timeout)
        self._log(f"kube-apiserver back after {elapsed:.1f}s")
        return elapsed

    # ---- access ---------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def kubeconfig(self) -> Path:
        assert self.workdir is not None, "cluster not started"
        return self.workdir / "admin.kubeconfig"

    @property
    def kubectl_path(self) -> Path:
        assert self.bin_dir is not None, "cluster not started"
        return self.bin_dir / "kubectl"

    def env(self) -> dict[str, str]:
        """Environment for child tools: KUBECONFIG and PATH with the binaries."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self,
        *args: str,
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess:
        """Run the built kubectl against this cluster; text output.

        Raises ClusterError (with stdout/stderr) on a non-zero exit when
        ``check`` is true.
        """
        argv = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        if isinstance(input, bytes):
            input = input.decode()
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
            )
        return proc

    def kubectl_json(self, *args: str, timeout: float = 60.0) -> Any:
        """``kubectl ... -o json`` parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def ssl_context(self) -> ssl.SSLContext:
        """Client TLS context: trusts the cluster CA, presents the admin cert."""
        if self._ssl_ctx is None:
            assert self.pki is not None
            ctx = ssl.create_default_context(cafile=str(self.pki.ca_crt))
            ctx.load_cert_chain(str(self.pki.admin_crt), str(self.pki.admin_key))
            self._ssl_ctx = ctx
        return self._ssl_ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 30.0,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> Any:
        """One HTTPS call to the apiserver as cluster admin.

        ``body`` is JSON-encoded unless it is bytes/str.  Returns the parsed
        JSON answer (or text if not JSON).  Raises APIError on non-2xx.
        """
        url = self.server + path
        if query:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = (
                body
                if isinstance(body, bytes)
                else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
            )
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as resp:
                raw = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            raise APIError(method, path, e.code, e.read().decode("utf-8", "replace")) from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    # ---- helpers for tests ---------------------------------------------

    def create_fake_node(
        self,
        name: str,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        pods: str = "110",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        extra_resources: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
        wait_ready: bool = True,
        timeout: float = 60.0,
    ) -> dict:
        """Create a Node that kwok manages, with ``gpus`` × ``nvidia.com/gpu``.

        Capacity = cpu/memory/pods/GPUs (+ ``extra_resources``); allocatable
        defaults to the same (override per resource with ``allocatable``).
        Returns the node object (after it is Ready when ``wait_ready``).
        """
        capacity = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
        if gpus:
            capacity[GPU_RESOURCE] = str(gpus)
        capacity.update({k: str(v) for k, v in (extra_resources or {}).items()})
        alloc = dict(capacity)
        alloc.update({k: str(v) for k, v in (allocatable or {}).items()})
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        node_labels.update(labels or {})
        node_annotations = {
            KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
            "node.alpha.kubernetes.io/ttl": "0",
        }
        node_annotations.update(annotations or {})
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": node_annotations},
            "spec": {"taints": [dict(t) for t in (taints or [])]},
            # kwok's node-initialize stage keeps capacity/allocatable as given.
            "status": {"capacity": capacity, "allocatable": alloc},
        }
        created = self.request("POST", "/api/v1/nodes", node)
        if wait_ready:
            return self.wait_node_ready(name, timeout=timeout)
        return created

    def wait_node_ready(self, name: str, timeout: float = 60.0) -> dict:
        def ready():
            n = self.request("GET", f"/api/v1/nodes/{name}")
            for c in n.get("status", {}).get("conditions", []):
                if c.get("type") == "Ready" and c.get("status") == "True":
                    return n
            return None

        return wait_for(ready, timeout, f"node {name} Ready")

    def bind_pod(self, namespace: str, pod: str, node: str) -> Any:
        """Bind a pod to a node via the pods/binding subresource."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body)

    def get_pod(self, namespace: str, name: str) -> dict:
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def wait_pod_phase(self, namespace: str, name: str, phase: str = "Running", timeout: float = 60.0) -> dict:
        def check():
            p = self.get_pod(namespace, name)
            return p if p.get("status", {}).get("phase") == phase else None

        return wait_for(check, timeout, f"pod {namespace}/{name} phase {phase}")

    # ---- internals ------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        import base64

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        assert self.pki is not None
        # JSON is valid YAML; kubectl and client-go read it fine.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpusched-e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.pki.ca_crt),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": b64(self.pki.admin_crt),
                        "client-key-data": b64(self.pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "gpusched-e2e", "context": {"cluster": "gpusched-e2e", "user": "admin"}}],
            "current-context": "gpusched-e2e",
        }
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f, indent=2)

    def _build_procs(self) -> None:
        assert self.workdir is not None and self.bin_dir is not None and self.pki is not None
        b, w, p, pki = self.bin_dir, self.workdir, self.ports, self.pki
        logs = w / "logs"

        def add(name: str, argv: list[str], env: Mapping[str, str] | None = None) -> None:
            self.procs[name] = _Proc(name, argv, logs / f"{name}.log", env, self._watchdog)

        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd_peer']}"
        add(
            "etcd",
            [
                str(b / "etcd"),
                "--name=e2e",
                f"--data-dir={w / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=e2e={peer_url}",
                "--initial-cluster-state=new",
                # test data is throw-away: trade durability for speed
                "--unsafe-no-fsync",
                "--auto-compaction-mode=periodic",
                "--auto-compaction-retention=5m",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )

        admission = ["--disable-admission-plugins=ServiceAccount"] if not self.service_account_admission else []
        runtime_config = (
            ["--runtime-config=" + ",".join(f"{gv}=false" for gv in self.disabled_apis)] if self.disabled_apis else []
        )
        add(
            "kube-apiserver",
            [
                str(self.apiserver_binary or b / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={pki.apiserver_crt}",
                f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                # no kubelets/pod network: don't publish 127.0.0.1 as the
                # "kubernetes" service endpoint (loopback is invalid there)
                "--endpoint-reconciler-type=none",
                "--authorization-mode=Node,RBAC" if self.node_authorizer else "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={w / 'apiserver-certs'}",
                *admission,
                *runtime_config,
                *self.extra_apiserver_args,
            ],
        )

        if self.with_controller_manager:
            add(
                "kube-controller-manager",
                [
                    str(b / "kube-controller-manager"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={p['controller_manager']}",
                    f"--cert-dir={w / 'kcm-certs'}",
                    "--leader-elect=false",
                    f"--root-ca-file={pki.ca_crt}",
                    f"--service-account-private-key-file={pki.sa_key}",
                    "--use-service-account-credentials=false",
                    "--kube-api-qps=200",
                    "--kube-api-burst=400",
                    "--profiling=false",
                    *self.extra_controller_manager_args,
                ],
            )

        if self.with_scheduler:
            if self.scheduler_qps is not None or self.scheduler_burst is not None:
                # With --config the client settings come from the file, so the kubeconfig goes there too.
                config = {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {
                        "kubeconfig": str(self.kubeconfig),
                        "qps": float(self.scheduler_qps if self.scheduler_qps is not None else 50),
                        "burst": int(self.scheduler_burst if self.scheduler_burst is not None else 100),
                    },
                    "leaderElection": {"leaderElect": False},
                }
                config_path = w / "kube-scheduler-config.yaml"
                config_path.write_text(json.dumps(config, indent=2))  # JSON is YAML
                client_args = [f"--config={config_path}"]
            else:
                client_args = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false"]
            add(
                "kube-scheduler",
                [
                    str(b / "kube-scheduler"),
                    *client_args,
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={p['scheduler']}",
                    f"--cert-dir={w / 'scheduler-certs'}",
                    "--profiling=false",
                    *self.extra_scheduler_args,
                ],
            )

        if self.with_kwok:
            stages = b / "kwok-stages.yaml"
            if not stages.exists():
                raise ClusterError(f"{stages} missing; rerun {BUILD_SCRIPT}")
            # kwok also reads ~/.kwok/kwok.yaml if present: isolate its HOME.
            kwok_home = w / "kwok-home"
            kwok_home.mkdir(exist_ok=True)
            env = dict(os.environ)
            env["HOME"] = str(kwok_home)
            add(
                "kwok",
                [
                    str(b / "kwok"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--config={stages}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
                    "--node-ip=127.0.0.1",
                    f"--node-port={p['kwok']}",
                    f"--server-address=127.0.0.1:{p['kwok']}",
                    "--node-lease-duration-seconds=40",
                    "--cidr=10.244.0.0/16",
                    *self.extra_kwok_args,
                ],
                env,
            )

    def _etcd_healthy(self) -> bool:
        self.procs["etcd"].check_running()
        url = f"http://127.0.0.1:{self.ports['etcd']}/health"
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read()).get("health") == "true"

    def _wait_apiserver_ready(self, timeout: float) -> None:
        def ready():
            self.procs["kube-apiserver"].check_running()
            self.procs["etcd"].check_running()
            return self.request("GET", "/readyz", timeout=5) == "ok"

        wait_for(ready, timeout, "kube-apiserver /readyz", interval=0.1, max_interval=0.5)

    def _component_healthy(self, name: str) -> bool:
        proc = self.procs[name]
        proc.check_running()
        if name == "kwok":
            url = f"http://127.0.0.1:{self.ports['kwok']}/healthz"
            ctx = None
        else:
            port = self.ports["controller_manager" if name == "kube-controller-manager" else "scheduler"]
            url = f"https://127.0.0.1:{port}/healthz"
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.read().decode().strip() == "ok"


__all__ = [
    "GPU_RESOURCE",
    "KWOK_NODE_ANNOTATION",
    "APIError",
    "ClusterError",
    "LocalCluster",
    "ProcessExited",
    "cached_binaries",
    "ensure_binaries",
    "free_port",
    "wait_for",
]
