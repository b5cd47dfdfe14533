"""The dashboard's command-line options (``gpusched run --dashboard-*``, ``gpusched dashboard``) and their checks.

Apart from :mod:`scheduler.k8s.serve.dashboard` so that building the command line and refusing options that do not go
together need none of the dashboard itself: ``gpusched run`` imports the dashboard (its pages, the cluster map,
``gpusched explain``'s answers) only when ``--dashboard-port`` is given, and a start without it does not pay for
that import before its first bind (docs/operator.md, "Start-up after a restart").
"""

from __future__ import annotations

import argparse

from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import pod as api_pod
from scheduler.dashboard import access as dashboard_access

AUTH_MODES = ("none", "token", "kubernetes")


def add_arguments(parser: argparse.ArgumentParser, *, default_port: int | None) -> None:
    parser.add_argument(
        "--dashboard-port",
        type=int,
        default=default_port,
        help="serve the read-only dashboard on this port (0: pick a free one); "
        + ("off unless given" if default_port is None else "default: %(default)s")
        + " (docs/dashboard.md)",
    )
    parser.add_argument(
        "--dashboard-auth",
        choices=AUTH_MODES,
        default=None,
        help="who may open the dashboard: none, token (--dashboard-token-file), or kubernetes (TokenReview and "
        "SubjectAccessReview, as kube-rbac-proxy; names from namespaces the viewer may not list pods in are hidden). "
        "Default: token when a token file is given, else none",
    )
    parser.add_argument("--dashboard-token-file", help="a file holding the one bearer token that opens the dashboard")


def add_local_arguments(parser: argparse.ArgumentParser) -> None:
    """``gpusched dashboard``: the operator's watches and this dashboard on this machine, with no lease (it never
    leads, so it never decides or writes); on 127.0.0.1:8765 unless told otherwise."""
    parser.add_argument("--kubeconfig", help="a kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--context", help="a context of the kubeconfig (default: its current context)")
    parser.add_argument("--config", help="the scheduler's YAML config file, as gpusched run has it (its profile)")
    parser.add_argument(
        "--scheduler-name", default=api_pod.SCHEDULER_NAME, help="the spec.schedulerName of the pods shown as waiting"
    )
    parser.add_argument("--bind-address", default="127.0.0.1", help="the address the dashboard listens on")
    parser.add_argument("--log-format", choices=("auto", "json", "console"), default="auto")
    add_arguments(parser, default_port=8765)
    # What gpusched run's code reads and this command does not offer: no lease, health and metrics on free ports.
    parser.set_defaults(
        observe=True, identity="gpusched-dashboard", health_port=0, metrics_port=0, namespace="", lease_name=""
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the arguments ask for the dashboard (``--dashboard-port``, which ``gpusched dashboard`` defaults)."""
    return getattr(args, "dashboard_port", None) is not None


def check_arguments(args: argparse.Namespace) -> None:
    """InvalidObject for dashboard arguments that do not go together (before any I/O, as the CLI reports it)."""
    auth = mode(args)
    token_file = getattr(args, "dashboard_token_file", None)
    if auth == "token":
        if not token_file:
            raise InvalidObject(
                "--dashboard-auth=token needs --dashboard-token-file", obj="dashboard", field="--dashboard-auth"
            )
        dashboard_access.SharedToken.from_file(token_file)  # unreadable or empty: said now
    elif token_file:
        raise InvalidObject(
            f"--dashboard-token-file is for --dashboard-auth=token, not {auth}",
            obj="dashboard",
            field="--dashboard-token-file",
        )


def mode(args: argparse.Namespace) -> str:
    """The access mode the arguments ask for: ``--dashboard-auth``, else token when a token file is given."""
    given = getattr(args, "dashboard_auth", None)
    return str(given or ("token" if getattr(args, "dashboard_token_file", None) else "none"))
