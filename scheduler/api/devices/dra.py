"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the scheduler reads it: DeviceClasses, ResourceSlices
(the devices drivers publish), ResourceClaims (what pods ask for, and what was allocated), and the claims a pod
names in ``spec.resourceClaims``.

Parsing only (no I/O); every parser raises :class:`InvalidObject` naming the object and field. Selector
expressions are compiled here (``scheduler.api.devices.cel``), so a class or claim with a broken expression is refused
when it is read, not when a pod needs it.

NVIDIA's GPUs and MIG devices among the devices: ``scheduler.api.devices.nvidia_gpus``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scheduler.api.basics import fields
from scheduler.api.basics import quantity as api_quantity
from scheduler.api.basics.errors import InvalidObject
from scheduler.api.devices import cel as api_cel
from scheduler.api.devices import consumable_capacity as api_capacity
from scheduler.api.objects import selectors
from scheduler.api.objects import volumes as api_volumes
from scheduler.api.objects.selectors import Toleration

if TYPE_CHECKING:
    from scheduler.api.devices.extended_resources import ExtendedClaim

GPU_DRIVER = "gpu.nvidia.com"
#: ``allocationMode`` values.
EXACT_COUNT = "ExactCount"
ALL = "All"
#: The most pods a claim may be reserved for (``ResourceClaimReservedForMaxSize``).
RESERVED_FOR_MAX = 256
#: Device taint effects that keep a device from being allocated unless tolerated.
TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: The most devices one ``All`` request may take (``AllocationResultsMaxSize``).
ALLOCATION_MAX = 32

#: Counter name -> amount in milli-units.
Counters = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice."""

    driver: str
    pool: str
    name: str
    #: Qualified attribute name (``domain/id``; the driver's domain when the slice gave none) -> value.
    attributes: Mapping[str, api_cel.AttributeValue] = field(default_factory=dict)
    #: Qualified capacity name -> amount in milli-units.
    capacity: Mapping[str, int] = field(default_factory=dict)
    #: The node it is on ("" for devices reachable from several nodes: see ``node_terms`` / ``all_nodes``).
    node: str = ""
    node_terms: tuple[selectors.NodeSelectorTerm, ...] = ()
    all_nodes: bool = False
    #: The shared counters it consumes when allocated (a partitionable device, such as a MIG placement): counter
    #: set name (of its pool) -> counters.
    consumes: tuple[tuple[str, Counters], ...] = ()
    #: Taints the driver put on it (``NoSchedule``/``NoExecute``: not allocated unless the request tolerates them).
    taints: tuple[selectors.Taint, ...] = ()
    #: ``allowMultipleAllocations``: shared by claims up to its capacity
    # (``scheduler.api.devices.consumable_capacity``).
    multiple: bool = False
    #: Qualified capacity name -> its ``requestPolicy``.
    policies: Mapping[str, api_capacity.RequestPolicy] = field(default_factory=dict)
    #: (driver, pool, name): how allocations name it (kept, not rebuilt: the allocator reads it a million times).
    key: tuple[str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.driver, self.pool, self.name))

    def attribute(self, qualified: str) -> api_cel.AttributeValue | None:
        return self.attributes.get(qualified if "/" in qualified else f"{self.driver}/{qualified}")

    def variable(self) -> dict[str, object]:
        return api_cel.device_variable(self.driver, self.attributes, self.capacity)


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    devices: tuple[Device, ...] = ()
    node: str = ""
    node_terms: tuple[selectors.NodeSelectorTerm, ...] = ()
    all_nodes: bool = False
    #: Counter sets its pool's devices consume (``spec.sharedCounters``): name -> counters.
    counter_sets: tuple[tuple[str, Counters], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[api_cel.Expression, ...] = ()
    #: The extended resource a pod may ask for to get devices of this class (``spec.extendedResourceName``).
    extended_resource: str = ""
    #: ``metadata.creationTimestamp`` (RFC 3339, so the text orders as the time): of two classes mapping one
    #: extended resource, the newer one is used, as in kube-scheduler.
    created: str = ""


@dataclass(frozen=True, slots=True)
class Choice:
    """What one request (or one ``firstAvailable`` alternative) asks for."""

    #: ``request`` or ``request/subrequest``: the name written into the allocation.
    name: str
    device_class: str
    selectors: tuple[api_cel.Expression, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    #: Device taints the request tolerates.
    tolerations: tuple[Toleration, ...] = ()
    #: ``capacity.requests``: capacity name (as written) -> amount in milli-units.
    capacity: api_capacity.Amounts = ()

    def shape(self) -> tuple[object, ...]:
        what = (self.name, self.device_class, self.mode, self.count, self.admin_access, self.tolerations, self.capacity)
        return (*what, tuple(e.source for e in self.selectors))

    def consumption(self, device: Device) -> dict[str, int] | None:
        """What it consumes of ``device``'s capacity, None if it cannot
        (``scheduler.api.devices.consumable_capacity``)."""
        asked = {_qualified(name, device.driver): amount for name, amount in self.capacity}
        return api_capacity.consumption(asked, device.capacity, device.policies)

    def tolerates(self, device: Device) -> bool:
        """Whether the request may get ``device``: every taint that keeps devices from new allocations
        (``NoSchedule``, ``NoExecute``) is tolerated."""
        return all(
            any(t.tolerates(taint) for t in self.tolerations)
            for taint in device.taints
            if taint.effect in TAINT_EFFECTS
        )


@dataclass(frozen=True, slots=True)
class Request:
    """A request of a claim: one choice, or alternatives tried in order (``firstAvailable``)."""

    name: str
    choices: tuple[Choice, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    #: The requests it applies to (all of the claim's when empty).
    requests: tuple[str, ...]
    #: Every device allocated for those requests has the same value of this qualified attribute.
    match_attribute: str = ""
    #: Every device allocated for those requests has a different value of this qualified attribute.
    distinct_attribute: str = ""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    #: A share of a device that allows multiple allocations: its ``shareID`` and ``consumedCapacity`` (qualified
    #: name -> milli-units).
    share_id: str = ""
    consumed: api_capacity.Amounts = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    devices: tuple[AllocatedDevice, ...]
    #: The node the devices are reachable from ("" for all nodes).
    node: str = ""


@dataclass(frozen=True, slots=True)
class Consumer:
    """An entry of ``status.reservedFor``."""

    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    requests: tuple[Request, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    deleting: bool = False
    #: The uid of the pod that owns it (a claim made from a pod's template), "" if none.
    owner_pod: str = ""
    resource_version: str = ""
    finalizers: tuple[str, ...] = ()
    #: The claim the scheduler made for its owner pod's extended resources
    # (``scheduler.api.devices.extended_resources``).
    extended: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def shape(self) -> tuple[object, ...]:
        """What an allocation depends on in the claim (not its name): the claims of one template have the same."""
        return (tuple((r.name, tuple(c.shape() for c in r.choices)) for r in self.requests), self.constraints)


@dataclass(frozen=True, slots=True)
class PodClaim:
    """An entry of a pod's ``spec.resourceClaims``."""

    #: The name the pod's containers use for it.
    name: str
    #: ``resourceClaimName``: an existing claim, shared with other pods.
    claim: str = ""
    #: ``resourceClaimTemplateName``: a claim made for this pod; its name is in ``status.resourceClaimStatuses``.
    template: str = ""
    #: The claim made from the template, once the resourceclaim controller has made it ("" before).
    generated: str = ""

    @property
    def claim_name(self) -> str:
        return self.claim or self.generated


def claim_key(namespace: str, pod_claim: PodClaim) -> str:
    return f"{namespace}/{pod_claim.claim_name}"


#: The name of a pod's extended resource claim until the API server names it (not a valid object name, so it
#: is no real claim's): the key is ``<namespace>/<extended-resources>.<pod name>``.
EXTENDED_CLAIM = "<extended-resources>"
#: Marks the claim the scheduler made for a pod's extended resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def extended_claim_key(namespace: str, pod_name: str) -> str:
    """The key of a pod's extended resource claim not made yet (one per pod, so decisions in flight differ)."""
    return f"{namespace}/{EXTENDED_CLAIM}.{pod_name}"


# --- parsing -------------------------------------------------------------------------------------------------


def _int(raw: object, *, obj: str, field: str, default: int) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidObject("expected an integer", obj=obj, field=field)
    return raw


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def parse_pod_claims(spec: Mapping[str, object], status: Mapping[str, object], *, obj: str) -> tuple[PodClaim, ...]:
    """A pod's ``spec.resourceClaims``, with the names of the claims made from templates so far."""
    generated: dict[str, str] = {}
    for i, raw in enumerate(
        fields.sequence(status.get("resourceClaimStatuses"), obj=obj, field="status.resourceClaimStatuses")
    ):
        entry = fields.mapping(raw, obj=obj, field=f"status.resourceClaimStatuses[{i}]")
        name = fields.string(entry.get("name"), obj=obj, field=f"status.resourceClaimStatuses[{i}].name")
        made = fields.string(
            entry.get("resourceClaimName"), obj=obj, field=f"status.resourceClaimStatuses[{i}].resourceClaimName"
        )
        if name and made:
            generated[name] = made
    claims: list[PodClaim] = []
    for i, raw in enumerate(fields.sequence(spec.get("resourceClaims"), obj=obj, field="spec.resourceClaims")):
        where = f"spec.resourceClaims[{i}]"
        entry = fields.mapping(raw, obj=obj, field=where)
        name = fields.string(entry.get("name"), obj=obj, field=f"{where}.name", required=True)
        claim = fields.string(entry.get("resourceClaimName"), obj=obj, field=f"{where}.resourceClaimName")
        template = fields.string(
            entry.get("resourceClaimTemplateName"), obj=obj, field=f"{where}.resourceClaimTemplateName"
        )
        if bool(claim) == bool(template):
            raise InvalidObject(
                "exactly one of resourceClaimName and resourceClaimTemplateName is required", obj=obj, field=where
            )
        claims.append(PodClaim(name, claim, template, generated.get(name, "") if template else ""))
    return tuple(claims)


def _selectors(raw: object, *, obj: str, field: str) -> tuple[api_cel.Expression, ...]:
    out: list[api_cel.Expression] = []
    for i, item in enumerate(fields.sequence(raw, obj=obj, field=field)):
        entry = fields.mapping(item, obj=obj, field=f"{field}[{i}]")
        expr = fields.mapping(entry.get("cel"), obj=obj, field=f"{field}[{i}].cel")
        source = fields.string(expr.get("expression"), obj=obj, field=f"{field}[{i}].cel.expression", required=True)
        out.append(api_cel.compile_expression(source, obj=obj, field=f"{field}[{i}].cel.expression"))
    return tuple(out)


def parse_device_class(raw: Mapping[str, object]) -> DeviceClass:
    meta = fields.mapping(raw.get("metadata"), obj="deviceclass", field="metadata")
    name = fields.string(meta.get("name"), obj="deviceclass", field="metadata.name", required=True)
    obj = f"deviceclass {name}"
    spec = fields.mapping(raw.get("spec"), obj=obj, field="spec")
    return DeviceClass(
        name,
        _selectors(spec.get("selectors"), obj=obj, field="spec.selectors"),
        fields.string(spec.get("extendedResourceName"), obj=obj, field="spec.extendedResourceName"),
        str(meta.get("creationTimestamp") or ""),
    )


def _attribute(raw: object, *, obj: str, field: str) -> api_cel.AttributeValue:
    entry = fields.mapping(raw, obj=obj, field=field)
    if "bool" in entry and isinstance(entry["bool"], bool):
        return entry["bool"]
    if "int" in entry:
        return _int(entry["int"], obj=obj, field=f"{field}.int", default=0)
    if "string" in entry:
        return fields.string(entry["string"], obj=obj, field=f"{field}.string")
    if "version" in entry:
        text = fields.string(entry["version"], obj=obj, field=f"{field}.version", required=True)
        try:
            api_cel.Version(text).key()
        except ValueError as exc:
            raise InvalidObject(str(exc), obj=obj, field=f"{field}.version") from exc
        return api_cel.Version(text)
    raise InvalidObject("an attribute needs one of bool, int, string, version", obj=obj, field=field)


def parse_resource_slice(raw: Mapping[str, object]) -> ResourceSlice:
    meta = fields.mapping(raw.get("metadata"), obj="resourceslice", field="metadata")
    name = fields.string(meta.get("name"), obj="resourceslice", field="metadata.name", required=True)
    obj = f"resourceslice {name}"
    spec = fields.mapping(raw.get("spec"), obj=obj, field="spec")
    driver = fields.string(spec.get("driver"), obj=obj, field="spec.driver", required=True)
    pool = fields.mapping(spec.get("pool"), obj=obj, field="spec.pool")
    pool_name = fields.string(pool.get("name"), obj=obj, field="spec.pool.name", required=True)
    generation = _int(pool.get("generation"), obj=obj, field="spec.pool.generation", default=0)
    count = _int(pool.get("resourceSliceCount"), obj=obj, field="spec.pool.resourceSliceCount", default=1)
    node = fields.string(spec.get("nodeName"), obj=obj, field="spec.nodeName")
    terms: tuple[selectors.NodeSelectorTerm, ...] = ()
    if spec.get("nodeSelector") is not None:
        terms = api_volumes.parse_node_selector(spec.get("nodeSelector"), obj=obj, field="spec.nodeSelector")
    all_nodes = spec.get("allNodes") is True
    devices: list[Device] = []
    for i, item in enumerate(fields.sequence(spec.get("devices"), obj=obj, field="spec.devices")):
        where = f"spec.devices[{i}]"
        entry = fields.mapping(item, obj=obj, field=where)
        device_name = fields.string(entry.get("name"), obj=obj, field=f"{where}.name", required=True)
        attributes = {
            _qualified(str(k), driver): _attribute(v, obj=obj, field=f"{where}.attributes.{k}")
            for k, v in fields.mapping(entry.get("attributes"), obj=obj, field=f"{where}.attributes").items()
        }
        capacity: dict[str, int] = {}
        policies: dict[str, api_capacity.RequestPolicy] = {}
        for k, v in fields.mapping(entry.get("capacity"), obj=obj, field=f"{where}.capacity").items():
            at = f"{where}.capacity.{k}"
            v = fields.mapping(v, obj=obj, field=at)
            value = v.get("value")
            amount = api_quantity.parse_quantity(value, obj=obj, field=f"{at}.value")
            capacity[_qualified(str(k), driver)] = api_quantity.to_milli(amount)
            policy = api_capacity.parse_policy(v.get("requestPolicy"), obj=obj, field=f"{at}.requestPolicy")
            if policy is not None:
                policies[_qualified(str(k), driver)] = policy
        consumes: list[tuple[str, Counters]] = []
        for j, use in enumerate(
            fields.sequence(entry.get("consumesCounters"), obj=obj, field=f"{where}.consumesCounters")
        ):
            at = f"{where}.consumesCounters[{j}]"
            use_map = fields.mapping(use, obj=obj, field=at)
            counter_set = fields.string(use_map.get("counterSet"), obj=obj, field=f"{at}.counterSet", required=True)
            consumes.append((counter_set, _counters(use_map.get("counters"), obj=obj, field=f"{at}.counters")))
        taints = tuple(
            selectors.Taint(
                fields.string(t.get("key"), obj=obj, field=f"{where}.taints[{j}].key", required=True),
                fields.string(t.get("value"), obj=obj, field=f"{where}.taints[{j}].value"),
                fields.string(t.get("effect"), obj=obj, field=f"{where}.taints[{j}].effect", required=True),
            )
            for j, t in enumerate(
                fields.mapping(item, obj=obj, field=f"{where}.taints[{j}]")
                for j, item in enumerate(fields.sequence(entry.get("taints"), obj=obj, field=f"{where}.taints"))
            )
        )
        multiple = entry.get("allowMultipleAllocations") is True
        devices.append(
            Device(
                driver,
                pool_name,
                device_name,
                attributes,
                capacity,
                node,
                terms,
                all_nodes,
                tuple(consumes),
                taints,
                multiple,
                policies,
            )
        )
    counter_sets: list[tuple[str, Counters]] = []
    for i, item in enumerate(fields.sequence(spec.get("sharedCounters"), obj=obj, field="spec.sharedCounters")):
        at = f"spec.sharedCounters[{i}]"
        entry = fields.mapping(item, obj=obj, field=at)
        set_name = fields.string(entry.get("name"), obj=obj, field=f"{at}.name", required=True)
        counter_sets.append((set_name, _counters(entry.get("counters"), obj=obj, field=f"{at}.counters")))
    return ResourceSlice(
        name, driver, pool_name, generation, max(count, 1), tuple(devices), node, terms, all_nodes, tuple(counter_sets)
    )


def _counters(raw: object, *, obj: str, field: str) -> Counters:
    """``{name: {value: quantity}}`` -> sorted (name, milli-units) pairs."""
    out: list[tuple[str, int]] = []
    for name, counter in fields.mapping(raw, obj=obj, field=field).items():
        value = fields.mapping(counter, obj=obj, field=f"{field}.{name}").get("value")
        amount = api_quantity.parse_quantity(value, obj=obj, field=f"{field}.{name}.value")
        out.append((str(name), api_quantity.to_milli(amount)))
    return tuple(sorted(out))


def _choice(entry: Mapping[str, object], name: str, *, obj: str, field: str) -> Choice:
    device_class = fields.string(entry.get("deviceClassName"), obj=obj, field=f"{field}.deviceClassName", required=True)
    mode = fields.string(entry.get("allocationMode"), obj=obj, field=f"{field}.allocationMode") or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise InvalidObject(
            f"allocationMode {mode!r} is not ExactCount or All", obj=obj, field=f"{field}.allocationMode"
        )
    count = _int(entry.get("count"), obj=obj, field=f"{field}.count", default=1)
    if mode == EXACT_COUNT and not 1 <= count <= ALLOCATION_MAX:
        raise InvalidObject(f"count must be 1..{ALLOCATION_MAX}", obj=obj, field=f"{field}.count")
    requested = fields.mapping(entry.get("capacity"), obj=obj, field=f"{field}.capacity").get("requests")
    capacity = api_capacity.parse_amounts(requested, driver="", obj=obj, field=f"{field}.capacity.requests")
    return Choice(
        name,
        device_class,
        _selectors(entry.get("selectors"), obj=obj, field=f"{field}.selectors"),
        mode,
        count if mode == EXACT_COUNT else 0,
        entry.get("adminAccess") is True,
        selectors.parse_tolerations(entry.get("tolerations"), obj=obj, field=f"{field}.tolerations"),
        capacity,
    )


def _allocation(raw: object, *, obj: str) -> Allocation | None:
    if raw is None:
        return None
    entry = fields.mapping(raw, obj=obj, field="status.allocation")
    devices = fields.mapping(entry.get("devices"), obj=obj, field="status.allocation.devices")
    results: list[AllocatedDevice] = []
    for i, item in enumerate(
        fields.sequence(devices.get("results"), obj=obj, field="status.allocation.devices.results")
    ):
        where = f"status.allocation.devices.results[{i}]"
        r = fields.mapping(item, obj=obj, field=where)
        results.append(
            AllocatedDevice(
                fields.string(r.get("request"), obj=obj, field=f"{where}.request"),
                fields.string(r.get("driver"), obj=obj, field=f"{where}.driver", required=True),
                fields.string(r.get("pool"), obj=obj, field=f"{where}.pool", required=True),
                fields.string(r.get("device"), obj=obj, field=f"{where}.device", required=True),
                r.get("adminAccess") is True,
                fields.string(r.get("shareID"), obj=obj, field=f"{where}.shareID"),
                api_capacity.parse_amounts(
                    r.get("consumedCapacity"), driver=str(r.get("driver")), obj=obj, field=f"{where}.consumedCapacity"
                ),
            )
        )
    node = ""
    selector = fields.mapping(entry.get("nodeSelector"), obj=obj, field="status.allocation.nodeSelector")
    for term in fields.sequence(selector.get("nodeSelectorTerms"), obj=obj, field="status.allocation.nodeSelector"):
        for f in fields.sequence(
            fields.mapping(term, obj=obj, field="status.allocation.nodeSelector").get("matchFields"), obj=obj, field=""
        ):
            req = fields.mapping(f, obj=obj, field="status.allocation.nodeSelector")
            values = fields.sequence(req.get("values"), obj=obj, field="status.allocation.nodeSelector")
            if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(values) == 1:
                node = str(values[0])
    return Allocation(tuple(results), node)


def parse_claim(raw: Mapping[str, object]) -> ResourceClaim:
    meta = fields.mapping(raw.get("metadata"), obj="resourceclaim", field="metadata")
    name = fields.string(meta.get("name"), obj="resourceclaim", field="metadata.name", required=True)
    namespace = fields.string(meta.get("namespace"), obj="resourceclaim", field="metadata.namespace") or "default"
    obj = f"resourceclaim {namespace}/{name}"
    spec = fields.mapping(raw.get("spec"), obj=obj, field="spec")
    devices = fields.mapping(spec.get("devices"), obj=obj, field="spec.devices")
    requests: list[Request] = []
    for i, item in enumerate(fields.sequence(devices.get("requests"), obj=obj, field="spec.devices.requests")):
        where = f"spec.devices.requests[{i}]"
        entry = fields.mapping(item, obj=obj, field=where)
        request_name = fields.string(entry.get("name"), obj=obj, field=f"{where}.name", required=True)
        if entry.get("firstAvailable") is not None:
            subs = fields.sequence(entry.get("firstAvailable"), obj=obj, field=f"{where}.firstAvailable")
            if not subs:
                raise InvalidObject("needs at least one alternative", obj=obj, field=f"{where}.firstAvailable")
            choices = []
            for j, sub in enumerate(subs):
                sub_where = f"{where}.firstAvailable[{j}]"
                sub_entry = fields.mapping(sub, obj=obj, field=sub_where)
                sub_name = fields.string(sub_entry.get("name"), obj=obj, field=f"{sub_where}.name", required=True)
                choices.append(_choice(sub_entry, f"{request_name}/{sub_name}", obj=obj, field=sub_where))
            requests.append(Request(request_name, tuple(choices)))
        else:
            exactly = fields.mapping(entry.get("exactly"), obj=obj, field=f"{where}.exactly")
            if not exactly:
                raise InvalidObject("needs exactly or firstAvailable", obj=obj, field=where)
            requests.append(Request(request_name, (_choice(exactly, request_name, obj=obj, field=f"{where}.exactly"),)))
    names = {r.name for r in requests}
    constraints: list[Constraint] = []
    for i, item in enumerate(fields.sequence(devices.get("constraints"), obj=obj, field="spec.devices.constraints")):
        where = f"spec.devices.constraints[{i}]"
        entry = fields.mapping(item, obj=obj, field=where)
        applies = tuple(str(r) for r in fields.sequence(entry.get("requests"), obj=obj, field=f"{where}.requests"))
        for r in applies:
            if r.split("/")[0] not in names:
                raise InvalidObject(f"no request named {r!r}", obj=obj, field=f"{where}.requests")
        attribute = fields.string(entry.get("matchAttribute"), obj=obj, field=f"{where}.matchAttribute")
        distinct = fields.string(entry.get("distinctAttribute"), obj=obj, field=f"{where}.distinctAttribute")
        if bool(attribute) == bool(distinct):
            raise InvalidObject("needs one of matchAttribute and distinctAttribute", obj=obj, field=where)
        kind = "matchAttribute" if attribute else "distinctAttribute"
        if "/" not in (attribute or distinct):
            raise InvalidObject("must be a qualified name (domain/attribute)", obj=obj, field=f"{where}.{kind}")
        constraints.append(Constraint(applies, attribute, distinct))
    status = fields.mapping(raw.get("status"), obj=obj, field="status")
    reserved: list[Consumer] = []
    for i, item in enumerate(fields.sequence(status.get("reservedFor"), obj=obj, field="status.reservedFor")):
        entry = fields.mapping(item, obj=obj, field=f"status.reservedFor[{i}]")
        reserved.append(
            Consumer(str(entry.get("resource") or ""), str(entry.get("name") or ""), str(entry.get("uid") or ""))
        )
    owner = ""
    annotations = fields.mapping(meta.get("annotations"), obj=obj, field="metadata.annotations")
    for item in fields.sequence(meta.get("ownerReferences"), obj=obj, field="metadata.ownerReferences"):
        owner_ref = fields.mapping(item, obj=obj, field="metadata.ownerReferences")
        if owner_ref.get("kind") == "Pod" and owner_ref.get("controller") is True:
            owner = str(owner_ref.get("uid") or "")
    return ResourceClaim(
        namespace,
        name,
        str(meta.get("uid") or ""),
        tuple(requests),
        tuple(constraints),
        _allocation(status.get("allocation"), obj=obj),
        tuple(reserved),
        bool(meta.get("deletionTimestamp")),
        owner,
        str(meta.get("resourceVersion") or ""),
        tuple(str(f) for f in fields.sequence(meta.get("finalizers"), obj=obj, field="metadata.finalizers")),
        annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true",
    )


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """What a decision does with one of the pod's claims: allocate it (``allocation``), or, for a claim already
    allocated, only reserve it for the pod (``allocation`` None)."""

    claim: str
    allocation: Allocation | None = None
    #: For the claim of the pod's extended resources: its requests and the pod's request mappings (the claim is
    #: created first when ``claim`` is still :func:`extended_claim_key`).
    extended: ExtendedClaim | None = None

    @property
    def devices(self) -> tuple[AllocatedDevice, ...]:
        return self.allocation.devices if self.allocation is not None else ()
