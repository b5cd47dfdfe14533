"""Persistent volumes as the scheduler sees them: a pod's claims, PersistentVolumeClaims, PersistentVolumes,
StorageClasses and CSINodes, parsed from raw Kubernetes dicts (no I/O).

A pod names its claims in ``spec.volumes``: a ``persistentVolumeClaim`` by ``claimName``, a generic ``ephemeral``
volume by the claim the ephemeral-volume controller creates for it, ``<pod>-<volume>``. The other kinds are
read as kube-scheduler's VolumeBinding, VolumeRestrictions, VolumeZone and NodeVolumeLimits plugins read them
(the fields, defaults and matching rules of ``k8s.io/component-helpers/storage/volume``): a claim's storage class
is its ``volume.beta.kubernetes.io/storage-class`` annotation, else ``spec.storageClassName``, else none; a
volume mode defaults to ``Filesystem``; a PersistentVolume's node affinity is a node selector.

Everything malformed raises :class:`InvalidObject` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.basics import fields, quantity
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.objects import affinity as api_affinity
from scheduler.api.objects import selectors

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", READ_WRITE_ONCE_POD})
#: The annotation kube-scheduler sets on a claim to ask for its volume to be provisioned for a node.
ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"
#: The legacy way to name a claim's or a volume's class; it wins over ``storageClassName``.
ANNOTATION_CLASS = "volume.beta.kubernetes.io/storage-class"
ANNOTATION_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
#: A StorageClass with this provisioner provisions nothing (static volumes only).
NO_PROVISIONER = "kubernetes.io/no-provisioner"
IMMEDIATE = "Immediate"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
#: Node labels a bound volume's labels may pin it to (kube-scheduler's VolumeZone): a volume labelled with one
#: of them fits only nodes with one of its values (several are joined by ``__``).
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One claim a pod's volume uses."""

    #: The claim's name, in the pod's namespace.
    name: str
    #: The pod volume's name, for messages.
    volume: str = ""
    read_only: bool = False
    #: A generic ephemeral volume: the claim is created for the pod (and must be owned by it).
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str = ""
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    #: ``spec.resources.requests.storage`` in bytes.
    request: int = 0
    volume_mode: str = "Filesystem"
    #: ``spec.selector``: None selects any volume.
    selector: api_affinity.LabelSelector | None = None
    #: ``spec.volumeName``: the volume the claim is bound (or pre-bound) to.
    volume_name: str = ""
    phase: str = "Pending"
    #: ``volume.kubernetes.io/selected-node``: provisioning was asked for that node.
    selected_node: str = ""
    #: The uid of the claim's controller (for an ephemeral volume's claim: the pod).
    owner: str = ""
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Whether the claim names its volume (bound, or pre-bound and being bound by the PV controller)."""
        return bool(self.volume_name)


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume."""

    name: str
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    #: ``spec.capacity.storage`` in bytes.
    capacity: int = 0
    volume_mode: str = "Filesystem"
    #: ``spec.nodeAffinity.required``: any one term must match; empty: any node.
    node_affinity: tuple[selectors.NodeSelectorTerm, ...] = ()
    claim_ref: ClaimRef | None = None
    phase: str = "Pending"
    labels: Mapping[str, str] = field(default_factory=dict)
    #: ``spec.csi``: the driver and the handle (for attach limits).
    csi_driver: str = ""
    csi_handle: str = ""
    deleting: bool = False

    def bound_to(self, claim: Claim) -> bool:
        """Whether the volume's ``claimRef`` names ``claim`` (kube's IsVolumeBoundToClaim)."""
        ref = self.claim_ref
        return (
            ref is not None
            and ref.namespace == claim.namespace
            and ref.name == claim.name
            and (not ref.uid or ref.uid == claim.uid)
        )


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str = IMMEDIATE
    #: ``allowedTopologies`` as node selector terms (any one must match); empty: anywhere.
    allowed_topologies: tuple[selectors.NodeSelectorTerm, ...] = ()
    default: bool = False

    @property
    def wait_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER


@dataclass(frozen=True, slots=True)
class CsiNode:
    """A CSINode: per driver, how many of its volumes the node may have attached (drivers without a count are not
    listed)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """The scheduler's choice for one unbound claim of a pod placed on ``node``: bind it to the static volume
    ``volume``, or (``volume`` empty) have its class provision one there."""

    claim: str
    node: str
    volume: str = ""

    @property
    def provision(self) -> bool:
        return not self.volume


def claim_key(namespace: str, pod_claim: PodClaim) -> str:
    return f"{namespace}/{pod_claim.name}"


# --- parsing --------------------------------------------------------------------------------------------------


def parse_pod_claims(spec: Mapping[str, object], *, pod_name: str, obj: str) -> tuple[PodClaim, ...]:
    """The claims of a pod's ``persistentVolumeClaim`` and ``ephemeral`` volumes, in ``spec.volumes`` order."""
    volumes = spec.get("volumes")
    if volumes is None:
        return ()
    if not isinstance(volumes, list):
        raise InvalidObject("expected a list of volumes", obj=obj, field="spec.volumes")
    claims: list[PodClaim] = []
    for i, volume in enumerate(volumes):
        where = f"spec.volumes[{i}]"
        if not isinstance(volume, Mapping):
            raise InvalidObject("expected a volume", obj=obj, field=where)
        name = fields.string(volume.get("name"), obj=obj, field=f"{where}.name")
        source = volume.get("persistentVolumeClaim")
        if source is not None:
            source = fields.mapping(source, obj=obj, field=f"{where}.persistentVolumeClaim")
            claim = fields.string(source.get("claimName"), obj=obj, field=f"{where}.persistentVolumeClaim.claimName")
            if not claim:
                raise InvalidObject(
                    "a claim name is required", obj=obj, field=f"{where}.persistentVolumeClaim.claimName"
                )
            claims.append(PodClaim(claim, name, read_only=source.get("readOnly") is True))
        elif volume.get("ephemeral") is not None:
            fields.mapping(volume.get("ephemeral"), obj=obj, field=f"{where}.ephemeral")
            if not name:
                raise InvalidObject("an ephemeral volume needs a name", obj=obj, field=f"{where}.name")
            claims.append(PodClaim(f"{pod_name}-{name}", name, ephemeral=True))
    return tuple(claims)


def _access_modes(raw: object, *, obj: str, field: str) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(m, str) for m in raw):
        raise InvalidObject("expected a list of access modes", obj=obj, field=field)
    unknown = [m for m in raw if m not in ACCESS_MODES]
    if unknown:
        raise InvalidObject(f"unknown access mode {unknown[0]!r}", obj=obj, field=field)
    return frozenset(raw)


def _storage(raw: object, *, obj: str, field: str) -> int:
    if raw is None:
        return 0
    return quantity.to_units(quantity.parse_quantity(raw, obj=obj, field=field))


def _meta(raw: Mapping[str, object], kind: str) -> tuple[Mapping[str, object], str]:
    meta = raw.get("metadata") or {}
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise InvalidObject("a name is required", obj=kind, field="metadata.name")
    return meta, str(meta["name"])


def _maps(
    raw: Mapping[str, object], meta: Mapping[str, object], *, obj: str
) -> tuple[Mapping[str, object], Mapping[str, object], Mapping[str, object]]:
    """A claim's or volume's spec, status and annotations, each a map (None: an empty one)."""
    spec = fields.mapping(raw.get("spec"), obj=obj, field="spec")
    status = fields.mapping(raw.get("status"), obj=obj, field="status")
    return spec, status, fields.mapping(meta.get("annotations"), obj=obj, field="metadata.annotations")


def _controller(meta: Mapping[str, object]) -> str:
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return str(owner.get("uid") or "")
    return ""


def parse_claim(raw: Mapping[str, object]) -> Claim:
    """Parse a PersistentVolumeClaim."""
    meta, name = _meta(raw, "persistentvolumeclaim")
    namespace = str(meta.get("namespace") or "default")
    obj = f"persistentvolumeclaim {namespace}/{name}"
    spec, status, annotations = _maps(raw, meta, obj=obj)
    resources = fields.mapping(spec.get("resources"), obj=obj, field="spec.resources")
    requests = fields.mapping(resources.get("requests"), obj=obj, field="spec.resources.requests")
    selector = None
    if spec.get("selector") is not None:
        selector = api_affinity.parse_label_selector(spec.get("selector"), obj=obj, field="spec.selector")
    storage_class = annotations.get(ANNOTATION_CLASS)
    if storage_class is None:
        storage_class = spec.get("storageClassName")
    return Claim(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        storage_class=fields.string(storage_class, obj=obj, field="spec.storageClassName"),
        access_modes=_access_modes(spec.get("accessModes"), obj=obj, field="spec.accessModes"),
        request=_storage(requests.get("storage"), obj=obj, field="spec.resources.requests.storage"),
        volume_mode=fields.string(spec.get("volumeMode"), obj=obj, field="spec.volumeMode") or "Filesystem",
        selector=selector,
        volume_name=fields.string(spec.get("volumeName"), obj=obj, field="spec.volumeName"),
        phase=str(status.get("phase") or "Pending"),
        selected_node=str(annotations.get(ANNOTATION_SELECTED_NODE) or ""),
        owner=_controller(meta),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def parse_node_selector(raw: object, *, obj: str, field: str) -> tuple[selectors.NodeSelectorTerm, ...]:
    """A NodeSelector (``nodeSelectorTerms``): any one term must match."""
    if raw is None:
        return ()
    selector = fields.mapping(raw, obj=obj, field=field)
    terms = selector.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise InvalidObject("expected a list of terms", obj=obj, field=f"{field}.nodeSelectorTerms")
    parsed = []
    for i, term in enumerate(terms):
        where = f"{field}.nodeSelectorTerms[{i}]"
        term = fields.mapping(term, obj=obj, field=where)
        parsed.append(
            selectors.NodeSelectorTerm(
                labels=selectors.requirements(term.get("matchExpressions"), obj=obj, field=f"{where}.matchExpressions"),
                fields=selectors.requirements(term.get("matchFields"), obj=obj, field=f"{where}.matchFields"),
            )
        )
    return tuple(parsed)


def parse_volume(raw: Mapping[str, object]) -> Volume:
    """Parse a PersistentVolume."""
    meta, name = _meta(raw, "persistentvolume")
    obj = f"persistentvolume {name}"
    spec, status, annotations = _maps(raw, meta, obj=obj)
    capacity = fields.mapping(spec.get("capacity"), obj=obj, field="spec.capacity")
    node_affinity = fields.mapping(spec.get("nodeAffinity"), obj=obj, field="spec.nodeAffinity")
    terms = parse_node_selector(node_affinity.get("required"), obj=obj, field="spec.nodeAffinity.required")
    if node_affinity.get("required") is not None and not terms:
        raise InvalidObject("a required node affinity needs a term", obj=obj, field="spec.nodeAffinity.required")
    ref = spec.get("claimRef")
    claim_ref = None
    if ref is not None:
        ref = fields.mapping(ref, obj=obj, field="spec.claimRef")
        claim_ref = ClaimRef(
            namespace=str(ref.get("namespace") or "default"),
            name=fields.string(ref.get("name"), obj=obj, field="spec.claimRef.name"),
            uid=str(ref.get("uid") or ""),
        )
    csi = fields.mapping(spec.get("csi"), obj=obj, field="spec.csi")
    storage_class = annotations.get(ANNOTATION_CLASS)
    if storage_class is None:
        storage_class = spec.get("storageClassName")
    labels = fields.mapping(meta.get("labels"), obj=obj, field="metadata.labels")
    return Volume(
        name=name,
        storage_class=fields.string(storage_class, obj=obj, field="spec.storageClassName"),
        access_modes=_access_modes(spec.get("accessModes"), obj=obj, field="spec.accessModes"),
        capacity=_storage(capacity.get("storage"), obj=obj, field="spec.capacity.storage"),
        volume_mode=fields.string(spec.get("volumeMode"), obj=obj, field="spec.volumeMode") or "Filesystem",
        node_affinity=terms,
        claim_ref=claim_ref,
        phase=str(status.get("phase") or "Pending"),
        labels={str(k): str(v) for k, v in labels.items()},
        csi_driver=str(csi.get("driver") or ""),
        csi_handle=str(csi.get("volumeHandle") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def parse_storage_class(raw: Mapping[str, object]) -> StorageClass:
    """Parse a StorageClass (``storage.k8s.io/v1``)."""
    meta, name = _meta(raw, "storageclass")
    obj = f"storageclass {name}"
    mode = raw.get("volumeBindingMode") or IMMEDIATE
    if mode not in (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER):
        raise InvalidObject(f"unknown binding mode {mode!r}", obj=obj, field="volumeBindingMode")
    topologies = raw.get("allowedTopologies") or []
    if not isinstance(topologies, list):
        raise InvalidObject("expected a list of topology terms", obj=obj, field="allowedTopologies")
    terms = []
    for i, term in enumerate(topologies):
        where = f"allowedTopologies[{i}].matchLabelExpressions"
        expressions = fields.mapping(term, obj=obj, field=f"allowedTopologies[{i}]").get("matchLabelExpressions") or []
        if not isinstance(expressions, list):
            raise InvalidObject("expected a list of label expressions", obj=obj, field=where)
        # A topology term's expression is a key and the values it may take: an In requirement.
        as_requirements = [
            {**fields.mapping(e, obj=obj, field=f"{where}[{j}]"), "operator": "In"} for j, e in enumerate(expressions)
        ]
        terms.append(selectors.NodeSelectorTerm(labels=selectors.requirements(as_requirements, obj=obj, field=where)))
    annotations = fields.mapping(meta.get("annotations"), obj=obj, field="metadata.annotations")
    return StorageClass(
        name=name,
        provisioner=fields.string(raw.get("provisioner"), obj=obj, field="provisioner"),
        binding_mode=str(mode),
        allowed_topologies=tuple(terms),
        default=str(annotations.get(ANNOTATION_DEFAULT_CLASS, "")).lower() == "true",
    )


def parse_csi_node(raw: Mapping[str, object]) -> CsiNode:
    """Parse a CSINode (``storage.k8s.io/v1``): the attach limit of each driver that reports one."""
    _, name = _meta(raw, "csinode")
    obj = f"csinode {name}"
    spec = fields.mapping(raw.get("spec"), obj=obj, field="spec")
    drivers = spec.get("drivers") or []
    if not isinstance(drivers, list):
        raise InvalidObject("expected a list of drivers", obj=obj, field="spec.drivers")
    limits: dict[str, int] = {}
    for i, driver in enumerate(drivers):
        where = f"spec.drivers[{i}]"
        driver = fields.mapping(driver, obj=obj, field=where)
        allocatable = fields.mapping(driver.get("allocatable"), obj=obj, field=f"{where}.allocatable")
        count = allocatable.get("count")
        if count is None:
            continue
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidObject(f"{count!r} is not a count", obj=obj, field=f"{where}.allocatable.count")
        limits[fields.string(driver.get("name"), obj=obj, field=f"{where}.name")] = count
    return CsiNode(name=name, limits=limits)


def zone_terms(volume: Volume) -> tuple[selectors.NodeSelectorTerm, ...]:
    """A bound volume's zone and region labels as one node selector term (kube-scheduler's VolumeZone): the node
    must carry each such label with one of the volume's values; empty when the volume has none."""
    requirements = tuple(
        selectors.Requirement(key, "In", tuple(sorted(set(volume.labels[key].split("__")))))
        for key in ZONE_LABELS
        if volume.labels.get(key)
    )
    return (selectors.NodeSelectorTerm(labels=requirements),) if requirements else ()
