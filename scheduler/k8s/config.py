"""The operator's configuration file (``gpusched run --config FILE.yaml``): parsed, checked, defaulted.

Every key is optional; an unknown key, or a value of the wrong kind, is an :class:`InvalidObject` naming the
file and the key, so a typo never silently falls back to a default::

    profile: {plugins: [...]}          # over scheduler/framework/default-profile.yaml, key by key
    binding: {concurrency: 64, qps: 200, burst: 400, timeoutSeconds: 10}
    backoff: {initialSeconds: 1, maxSeconds: 10}
    reservations: {afterSeconds: null}
    leaderElection: {enabled: true, leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.api.basics.errors import InvalidObject
from scheduler.framework import profile
from scheduler.framework.profile import ProfileConfig


@dataclass(frozen=True, slots=True)
class BindingConfig:
    #: Bindings in flight at once.
    concurrency: int = 64
    #: Requests per second to the API server, over all writers (bindings, Events, status).
    qps: float = 200.0
    #: Requests allowed at once above ``qps`` after a quiet spell.
    burst: int = 400
    #: Seconds one request may take before its outcome counts as unknown.
    timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    #: The wait after a pod's first failed attempt; it doubles per attempt up to ``max_s``.
    initial_s: float = 1.0
    max_s: float = 10.0


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    enabled: bool = True
    #: How long a lease holds without renewal before another replica may take it.
    lease_duration_s: float = 15.0
    #: How long the leader keeps trying to renew before it stops scheduling.
    renew_deadline_s: float = 10.0
    #: Seconds between attempts to take or renew the lease.
    retry_period_s: float = 2.0


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    profile: ProfileConfig
    binding: BindingConfig = BindingConfig()
    backoff: BackoffConfig = BackoffConfig()
    #: Seconds a job waits without room before it reserves nodes; None: no reservations.
    reserve_after_s: float | None = None
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)


_SECTIONS = ("profile", "binding", "backoff", "reservations", "leaderElection")


def load(path: str | Path | None) -> OperatorConfig:
    """Read a config file (None: every default)."""
    if path is None:
        return parse({}, source="default config")
    source = f"config {path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidObject(f"cannot read: {exc.strerror}", obj=source) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidObject(f"not valid YAML: {exc}", obj=source) from None
    return parse(raw if raw is not None else {}, source=source)


def parse(raw: object, *, source: str = "config") -> OperatorConfig:
    top = _section(raw, "", source, _SECTIONS)
    default_profile = yaml.safe_load(profile.default_text())
    profile_raw = top.get("profile")
    if profile_raw is None:
        profile_config = profile.parse(default_profile, source="default profile")
    else:
        if not isinstance(profile_raw, Mapping):
            raise InvalidObject(
                "must be a map (a profile or overrides of the default one)", obj=source, field="profile"
            )
        try:
            profile_config = profile.parse({**default_profile, **profile_raw}, source=source)
        except InvalidObject as exc:
            raise exc.located(obj=source, prefix="profile") from None

    b = _section(top.get("binding"), "binding", source, ("concurrency", "qps", "burst", "timeoutSeconds"))
    binding = BindingConfig(
        concurrency=_int(b, "concurrency", 64, source, "binding", minimum=1),
        qps=_number(b, "qps", 200.0, source, "binding", positive=True),
        burst=_int(b, "burst", 400, source, "binding", minimum=1),
        timeout_s=_number(b, "timeoutSeconds", 10.0, source, "binding", positive=True),
    )
    o = _section(top.get("backoff"), "backoff", source, ("initialSeconds", "maxSeconds"))
    backoff = BackoffConfig(
        initial_s=_number(o, "initialSeconds", 1.0, source, "backoff"),
        max_s=_number(o, "maxSeconds", 10.0, source, "backoff"),
    )
    if backoff.max_s < backoff.initial_s:
        raise InvalidObject("must be at least backoff.initialSeconds", obj=source, field="backoff.maxSeconds")
    r = _section(top.get("reservations"), "reservations", source, ("afterSeconds",))
    after = r.get("afterSeconds")
    reserve_after_s = None if after is None else _number(r, "afterSeconds", 0.0, source, "reservations")
    e = _section(
        top.get("leaderElection"),
        "leaderElection",
        source,
        ("enabled", "leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"),
    )
    enabled = e.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidObject(f"{enabled!r} is not true or false", obj=source, field="leaderElection.enabled")
    election = LeaderElectionConfig(
        enabled=enabled,
        lease_duration_s=_number(e, "leaseDurationSeconds", 15.0, source, "leaderElection", positive=True),
        renew_deadline_s=_number(e, "renewDeadlineSeconds", 10.0, source, "leaderElection", positive=True),
        retry_period_s=_number(e, "retryPeriodSeconds", 2.0, source, "leaderElection", positive=True),
    )
    if not election.retry_period_s < election.renew_deadline_s < election.lease_duration_s:
        raise InvalidObject(
            "needs retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds "
            "(a leader must give up before another replica may take the lease)",
            obj=source,
            field="leaderElection",
        )
    return OperatorConfig(
        profile=profile_config,
        binding=binding,
        backoff=backoff,
        reserve_after_s=reserve_after_s,
        leader_election=election,
    )


def _section(raw: object, name: str, source: str, known: tuple[str, ...]) -> Mapping[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidObject("must be a map", obj=source, field=name or "(top level)")
    for key in raw:
        if key not in known:
            where = f"{name}.{key}" if name else str(key)
            raise InvalidObject(f"unknown key (expected one of {', '.join(known)})", obj=source, field=where)
    return raw


def _number(
    raw: Mapping[str, Any], key: str, default: float, source: str, section: str, *, positive: bool = False
) -> float:
    value = raw.get(key, default)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        wanted = "a number > 0" if positive else "a number >= 0"
        raise InvalidObject(f"{value!r} is not {wanted}", obj=source, field=f"{section}.{key}")
    return float(value)


def _int(raw: Mapping[str, Any], key: str, default: int, source: str, section: str, *, minimum: int) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidObject(f"{value!r} is not an integer >= {minimum}", obj=source, field=f"{section}.{key}")
    return value
