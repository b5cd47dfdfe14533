"""Inter-pod affinity and anti-affinity terms, read as kube-scheduler's InterPodAffinity plugin reads them.

A term selects pods (a label selector, in some namespaces) and names a topology key; the pod wants to be (or
not to be) in the same domain of that key (the nodes sharing that label's value) as the pods it selects.

What the parser resolves once, so that the cache and the plugin compare plain values:

- namespaces: the term's ``namespaces`` list, or the pod's own namespace when it has neither ``namespaces`` nor
  ``namespaceSelector``; an empty ``namespaceSelector`` (``{}``) means every namespace (``ALL_NAMESPACES``). A
  ``namespaceSelector`` with labels needs namespace labels, which gpusched does not watch: a pending pod of ours
  asking for one is refused (``scheduler.api.objects.pod.Unsupported``); an existing pod's is read as every namespace,
  the safe side for its anti-affinity (never placed against it), at worst too strict for its affinity score.
- ``matchLabelKeys`` / ``mismatchLabelKeys``: each key the pod has adds ``key In (its value)`` /
  ``key NotIn (its value)`` to the selector, as the API server merges them at creation (doing it again is
  harmless: the same requirement twice).
- a term without ``labelSelector`` selects no pod; an empty one (``{}``) selects every pod.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.api.basics import fields
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import selectors
from scheduler.api.objects.selectors import Requirement

#: The namespaces of a term that selects pods in every namespace.
ALL_NAMESPACES: frozenset[str] = frozenset({"*"})


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must hold; ``nothing`` selects no pod at all (a missing selector)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.nothing and all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    selector: LabelSelector
    namespaces: frozenset[str]
    topology_key: str
    #: True when the term's ``namespaceSelector`` had labels (read as every namespace, see the module note).
    namespace_labels: bool = False

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one this term selects."""
        in_scope = self.namespaces == ALL_NAMESPACES or namespace in self.namespaces
        return in_scope and self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's podAffinity and podAntiAffinity, required and preferred."""

    required: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    anti_required: tuple[AffinityTerm, ...] = ()
    anti_preferred: tuple[WeightedTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred or self.anti_required or self.anti_preferred)

    @property
    def terms(self) -> tuple[AffinityTerm, ...]:
        return (
            self.required
            + self.anti_required
            + tuple(w.term for w in self.preferred)
            + tuple(w.term for w in self.anti_preferred)
        )


NO_AFFINITY = PodAffinity()


def _requirements(raw: object, *, obj: str, field: str) -> tuple[Requirement, ...]:
    return selectors.requirements(raw, obj=obj, field=field, operators=selectors.LABEL_OPERATORS)


def parse_label_selector(raw: object, *, obj: str, field: str) -> LabelSelector:
    if raw is None:
        return LabelSelector(nothing=True)
    if not isinstance(raw, Mapping):
        raise InvalidObject("expected a label selector", obj=obj, field=field)
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidObject("expected a map of labels", obj=obj, field=f"{field}.matchLabels")
    requirements = tuple(Requirement(str(k), "In", (str(v),)) for k, v in sorted(labels.items()))
    requirements += _requirements(raw.get("matchExpressions"), obj=obj, field=f"{field}.matchExpressions")
    return LabelSelector(requirements)


def _label_keys(raw: object, *, obj: str, field: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise InvalidObject("expected a list of label keys", obj=obj, field=field)
    return tuple(raw)


def parse_term(raw: object, *, namespace: str, labels: Mapping[str, str], obj: str, field: str) -> AffinityTerm:
    if not isinstance(raw, Mapping):
        raise InvalidObject("expected a pod affinity term", obj=obj, field=field)
    key = raw.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise InvalidObject("a pod affinity term needs a topologyKey", obj=obj, field=f"{field}.topologyKey")
    selector = parse_label_selector(raw.get("labelSelector"), obj=obj, field=f"{field}.labelSelector")
    extra: list[Requirement] = []
    for name, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        for label in _label_keys(raw.get(name), obj=obj, field=f"{field}.{name}"):
            if label in labels:
                extra.append(Requirement(label, operator, (labels[label],)))
    if extra and not selector.nothing:
        selector = LabelSelector(selector.requirements + tuple(extra))
    names = raw.get("namespaces") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidObject("expected a list of namespaces", obj=obj, field=f"{field}.namespaces")
    ns_selector = raw.get("namespaceSelector")
    if ns_selector is not None and not isinstance(ns_selector, Mapping):
        raise InvalidObject("expected a label selector", obj=obj, field=f"{field}.namespaceSelector")
    if ns_selector is not None and (ns_selector.get("matchLabels") or ns_selector.get("matchExpressions")):
        return AffinityTerm(selector, ALL_NAMESPACES, key, namespace_labels=True)
    if ns_selector is not None:
        return AffinityTerm(selector, ALL_NAMESPACES, key)
    return AffinityTerm(selector, frozenset(names) if names else frozenset({namespace}), key)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _terms(
    affinity: Mapping[str, object], *, base: str, namespace: str, labels: Mapping[str, str], obj: str
) -> tuple[AffinityTerm, ...]:
    """The required terms of ``affinity`` (a ``podAffinity`` or ``podAntiAffinity`` at ``base``)."""
    raw, field = affinity.get(_REQUIRED), f"{base}.{_REQUIRED}"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidObject("expected a list of terms", obj=obj, field=field)
    return tuple(
        parse_term(t, namespace=namespace, labels=labels, obj=obj, field=f"{field}[{i}]") for i, t in enumerate(raw)
    )


def _weighted(
    affinity: Mapping[str, object], *, base: str, namespace: str, labels: Mapping[str, str], obj: str
) -> tuple[WeightedTerm, ...]:
    """The preferred (weighted) terms of ``affinity`` (a ``podAffinity`` or ``podAntiAffinity`` at ``base``)."""
    raw, field = affinity.get(_PREFERRED), f"{base}.{_PREFERRED}"
    parsed = []
    terms = fields.maps(
        raw, obj=obj, field=field, not_list="expected a list of weighted terms", not_map="expected a weighted term"
    )
    for where, item in terms:
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise InvalidObject(f"{weight!r} is not a weight 1..100", obj=obj, field=f"{where}.weight")
        term = parse_term(
            item.get("podAffinityTerm"), namespace=namespace, labels=labels, obj=obj, field=f"{where}.podAffinityTerm"
        )
        parsed.append(WeightedTerm(weight, term))
    return tuple(parsed)


def parse_pod_affinity(
    spec: Mapping[str, object], *, namespace: str, labels: Mapping[str, str], obj: str
) -> PodAffinity:
    """The pod's inter-pod affinity and anti-affinity (``NO_AFFINITY`` when it has none)."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return NO_AFFINITY
    parts: dict[str, object] = {}
    for name, prefix in (("podAffinity", ""), ("podAntiAffinity", "anti_")):
        raw = affinity.get(name)
        if raw is None:
            continue
        base = f"spec.affinity.{name}"
        if not isinstance(raw, Mapping):
            raise InvalidObject("expected a map", obj=obj, field=base)
        parts[f"{prefix}required"] = _terms(raw, base=base, namespace=namespace, labels=labels, obj=obj)
        parts[f"{prefix}preferred"] = _weighted(raw, base=base, namespace=namespace, labels=labels, obj=obj)
    if not parts:
        return NO_AFFINITY
    parsed = PodAffinity(**parts)  # type: ignore[arg-type]
    return parsed if parsed else NO_AFFINITY


# --- topology spread constraints -----------------------------------------------------------------------------

#: A pseudo label key (a space is not allowed in real ones) under which the scheduler indexes a pod's controller
#: (its ownerReference with ``controller: true``), for the cluster-default spread constraints: their selector is
#: "pods of the same controller" (kube-scheduler derives it from the Services, ReplicaSets and StatefulSets
#: selecting the pod, which gpusched does not watch).
OWNER_KEY = " controller"

_WHEN = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topologySpreadConstraint: pods the selector names (in the pod's namespace) kept within ``max_skew``
    of the emptiest domain of ``topology_key``; ``hard`` for DoNotSchedule, else ScheduleAnyway (a score)."""

    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector
    min_domains: int = 1
    #: nodeAffinityPolicy Honor (default): only nodes matching the pod's node selector and affinity count.
    honor_affinity: bool = True
    #: nodeTaintsPolicy Honor (default Ignore): only nodes whose taints the pod tolerates count.
    honor_taints: bool = False


#: kube-scheduler's default constraints (PodTopologySpread's ``defaultingType: System``), applied as scores to a
#: pod with no constraints of its own; the selector is filled per pod (its controller).
DEFAULT_SPREAD = (("kubernetes.io/hostname", 3), ("topology.kubernetes.io/zone", 5))


def default_spread(owner: str, service_labels: tuple[tuple[str, str], ...] = ()) -> tuple[SpreadConstraint, ...]:
    """The cluster-default constraints for a pod of controller ``owner`` selected by Services whose selectors
    merge into ``service_labels`` (none without either): they count the pods of the same controller that these
    Services select, as kube-scheduler's default selector ANDs its controllers' and Services' selectors."""
    if not owner and not service_labels:
        return ()
    requirements = [Requirement(OWNER_KEY, "In", (owner,))] if owner else []
    requirements += [Requirement(key, "In", (value,)) for key, value in service_labels]
    selector = LabelSelector(tuple(requirements))
    return tuple(SpreadConstraint(skew, key, False, selector) for key, skew in DEFAULT_SPREAD)


def services_selecting(
    labels: Mapping[str, str], selectors: Iterable[Mapping[str, str]]
) -> tuple[tuple[str, str], ...]:
    """The merged label pairs of the Service ``selectors`` that select a pod with ``labels`` (a Service's
    ``spec.selector`` selects the pods that carry all its pairs; an empty one selects none)."""
    merged = {
        pair
        for selector in selectors
        if selector and all(labels.get(k) == v for k, v in selector.items())
        for pair in selector.items()
    }
    return tuple(sorted(merged))


def parse_spread(raw: object, *, labels: Mapping[str, str], obj: str) -> tuple[SpreadConstraint, ...]:
    base = "spec.topologySpreadConstraints"
    parsed = []
    constraints = fields.maps(
        raw, obj=obj, field=base, not_list="expected a list of constraints", not_map="expected a constraint"
    )
    for where, item in constraints:
        skew = item.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise InvalidObject(f"{skew!r} is not an integer >= 1", obj=obj, field=f"{where}.maxSkew")
        key = item.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise InvalidObject("a constraint needs a topologyKey", obj=obj, field=f"{where}.topologyKey")
        when = item.get("whenUnsatisfiable")
        if when not in _WHEN:
            raise InvalidObject(
                f"{when!r} is not one of {', '.join(_WHEN)}", obj=obj, field=f"{where}.whenUnsatisfiable"
            )
        min_domains = item.get("minDomains")
        if min_domains is not None and (
            not isinstance(min_domains, int)
            or isinstance(min_domains, bool)
            or min_domains < 1
            or when != "DoNotSchedule"
        ):
            raise InvalidObject(
                f"{min_domains!r}: minDomains is an integer >= 1, with DoNotSchedule only",
                obj=obj,
                field=f"{where}.minDomains",
            )
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = item.get(name) or default
            if policy not in _POLICIES:
                raise InvalidObject(
                    f"{policy!r} is not one of {', '.join(_POLICIES)}", obj=obj, field=f"{where}.{name}"
                )
            policies.append(policy == "Honor")
        selector = parse_label_selector(item.get("labelSelector"), obj=obj, field=f"{where}.labelSelector")
        keys = _label_keys(item.get("matchLabelKeys"), obj=obj, field=f"{where}.matchLabelKeys")
        extra = tuple(Requirement(k, "In", (labels[k],)) for k in keys if k in labels)
        if extra and not selector.nothing:
            selector = LabelSelector(selector.requirements + extra)
        parsed.append(
            SpreadConstraint(
                max_skew=skew,
                topology_key=key,
                hard=when == "DoNotSchedule",
                selector=selector,
                min_domains=min_domains or 1,
                honor_affinity=policies[0],
                honor_taints=policies[1],
            )
        )
    return tuple(parsed)


def _controller(meta: Mapping[str, object]) -> Mapping[str, object]:
    """A pod's ownerReference with ``controller: true``, or an empty map."""
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("controller"):
            return owner
    return {}


def controller_of(meta: Mapping[str, object]) -> str:
    """The uid of a pod's controller (its ownerReference with ``controller: true``), or ""."""
    return str(_controller(meta).get("uid") or "")


def controller_kind_of(meta: Mapping[str, object]) -> str:
    """The kind of a pod's controller (``ReplicaSet``, ``Job``...), or ""."""
    return str(_controller(meta).get("kind") or "")


def controller_name_of(meta: Mapping[str, object]) -> str:
    """The name of a pod's controller, or ""."""
    return str(_controller(meta).get("name") or "")
