"""Every request gpusched makes to the API server, with the right that allows it: the reviewed table RBAC is made from.

One row per call site and resource: the module of ``scheduler/k8s/`` that makes it, the generated client's class and
method it goes through (every request of the package does, through ``scheduler.k8s.client.Client.call`` or an
informer's list-then-watch), the API group and resource (``pods/binding``: a subresource), the RBAC verbs, why the
scheduler needs it, and whose rights it is made with:

- :data:`CLUSTER`: ``gpusched run``'s ServiceAccount, through the ClusterRole ``gpusched`` of manifests/rbac.yaml;
- :data:`LEASE`: the same ServiceAccount, through the Role ``gpusched-leader-election`` in the scheduler's namespace
  (``get`` and ``update`` narrowed to the Lease's name, ``named``);
- :data:`AUTH_DELEGATOR`: the access checks of ``/explain`` (every caller) and of the dashboard's viewers
  (``--dashboard-auth=kubernetes``), through the built-in ClusterRole ``system:auth-delegator``, which
  manifests/rbac.yaml binds to the ServiceAccount (``gpusched-auth-delegator``);
- :data:`USER`: ``gpusched explain``, run by a person with their own kubeconfig: not the ServiceAccount's to grant;
- :data:`DISCOVERY`: the API's discovery, which every authenticated client may read (``system:discovery``).

A row with ``checked`` is a right the API server checks while serving a call of another row (a synthetic
subresource, such as ``resourceclaims/binding``): no scan of the code finds those, only a run with the shipped rights
(tests/e2e/test_rbac_e2e.py, or any scenario under ``GPUSCHED_E2E_AS_SERVICE_ACCOUNT=1``).

kopf's watches (``scheduler.k8s.feeds.handlers``) are rows of :data:`KOPF` (list and watch of what its handlers name;
with
the settings there kopf posts no Events, keeps nothing on the objects, uses no peering and scans no CRDs).

tests/k8s/test_rbac.py checks this table against the code (a generated-client method the package names and the table
does not, or the other way round, fails; so does a row whose group, resource or verb the method's path contradicts)
and against manifests/rbac.yaml (each right needed is granted, and nothing else is). docs/operator.md, "RBAC", points
here.
"""

from __future__ import annotations

from dataclasses import dataclass

CLUSTER = "ClusterRole gpusched"
LEASE = "Role gpusched-leader-election"
AUTH_DELEGATOR = "ClusterRole system:auth-delegator"
USER = "the caller's own kubeconfig"
DISCOVERY = "discovery (every authenticated client)"

#: The pseudo-class of kopf's own watches.
KOPF = "kopf"

LIST_WATCH = ("list", "watch")


@dataclass(frozen=True, slots=True)
class Call:
    """One kind of request: who makes it, through which method, on what, with which verbs, and why."""

    #: The module under scheduler/k8s/ (``binder``).
    module: str
    #: The generated API class (``CoreV1Api``), or :data:`KOPF`.
    api: str
    #: The generated method (``create_namespaced_pod_binding``); for :data:`KOPF`, ``watch``.
    method: str
    #: The API group ("" for the core group).
    group: str
    #: The resource, with its subresource after a slash (``pods/binding``).
    resource: str
    verbs: tuple[str, ...]
    why: str
    #: Whose rights the request is made with (the constants above).
    rights: str = CLUSTER
    #: ``get``/``update`` narrowed to one object's name (the Lease's).
    named: bool = False
    #: Not the request's own right but one the API server checks while serving it (why): the row's method has a row
    #: of its own as well.
    checked: str = ""


CALLS: tuple[Call, ...] = (
    # --- the informers (scheduler.k8s.run, volume_binding, device_claims): list, then watch ------------------------
    Call("run", "CoreV1Api", "list_node", "", "nodes", LIST_WATCH, "every node's capacity, labels and taints"),
    Call(
        "run",
        "CoreV1Api",
        "list_pod_for_all_namespaces",
        "",
        "pods",
        LIST_WATCH,
        "every pod counts on its node; the pods of its scheduler name are scheduled",
    ),
    Call(
        "run",
        "CoreV1Api",
        "list_service_for_all_namespaces",
        "",
        "services",
        LIST_WATCH,
        "the default topology spreading counts the pods of the Services that select a pod, as kube-scheduler's",
    ),
    Call(
        "run",
        "PolicyV1Api",
        "list_pod_disruption_budget_for_all_namespaces",
        "policy",
        "poddisruptionbudgets",
        LIST_WATCH,
        "preemption prefers victims whose PodDisruptionBudget allows a disruption",
    ),
    Call(
        "volume_binding",
        "CoreV1Api",
        "list_persistent_volume_claim_for_all_namespaces",
        "",
        "persistentvolumeclaims",
        LIST_WATCH,
        "a pod's volumes decide where it fits",
    ),
    Call(
        "volume_binding", "CoreV1Api", "list_persistent_volume", "", "persistentvolumes", LIST_WATCH, "static volumes"
    ),
    Call(
        "volume_binding",
        "StorageV1Api",
        "list_storage_class",
        "storage.k8s.io",
        "storageclasses",
        LIST_WATCH,
        "binding modes and provisioners",
    ),
    Call(
        "volume_binding",
        "StorageV1Api",
        "list_csi_node",
        "storage.k8s.io",
        "csinodes",
        LIST_WATCH,
        "per-node volume limits of CSI drivers",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "list_device_class",
        "resource.k8s.io",
        "deviceclasses",
        LIST_WATCH,
        "Dynamic Resource Allocation: what a claim's request selects",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "list_resource_slice",
        "resource.k8s.io",
        "resourceslices",
        LIST_WATCH,
        "the devices each node publishes",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "list_resource_claim_for_all_namespaces",
        "resource.k8s.io",
        "resourceclaims",
        LIST_WATCH,
        "pods' claims and the devices already allocated",
    ),
    Call(
        "numa_zones",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        "topology.node.k8s.io",
        "noderesourcetopologies",
        LIST_WATCH,
        "nodes' NUMA zones and their kubelets' Topology Manager policies (the numa filter), where published",
    ),
    Call(
        "handlers",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        "scheduling.gpusched.io",
        "podgroups",
        LIST_WATCH,
        "gangs",
    ),
    # --- kopf's watches (scheduler.k8s.feeds.handlers) ----------------------------------------------------------------
    Call("handlers", KOPF, "watch", "scheduling.gpusched.io", "queues", LIST_WATCH, "queues and their shares"),
    Call(
        "handlers", KOPF, "watch", "scheduling.gpusched.io", "topologies", LIST_WATCH, "the cluster's topology levels"
    ),
    Call(
        "handlers",
        KOPF,
        "watch",
        "scheduling.gpusched.io",
        "reservations",
        LIST_WATCH,
        "room held ahead of its owners' pods",
    ),
    Call(
        "handlers",
        KOPF,
        "watch",
        "",
        "namespaces",
        LIST_WATCH,
        "namespaces' default queues, and the moment the custom resources are listed (readiness)",
    ),
    Call(
        "handlers",
        KOPF,
        "watch",
        "scheduling.x-k8s.io",
        "podgroups",
        LIST_WATCH,
        "scheduler-plugins' PodGroups, read as gangs when their CRD is served",
    ),
    Call(
        "handlers",
        "CustomObjectsApi",
        "get_api_resources",
        "",
        "",
        (),
        "whether the CRDs are served before kopf starts",
        rights=DISCOVERY,
    ),
    Call(
        "discovery",
        "CustomObjectsApi",
        "get_api_resources",
        "",
        "",
        (),
        "whether the cluster serves resource.k8s.io/v1 and topology.node.k8s.io/v1alpha2, once at start (DRA, or NUMA"
        " placement, off where it does not)",
        rights=DISCOVERY,
    ),
    # --- binding (scheduler.k8s.ports.binder) -------------------------------------------------------------------------
    Call("binder", "CoreV1Api", "create_namespaced_pod_binding", "", "pods/binding", ("create",), "binds a pod"),
    Call(
        "binder",
        "CoreV1Api",
        "read_namespaced_pod",
        "",
        "pods",
        ("get",),
        "a binding whose answer was lost: was the pod bound?",
    ),
    # --- the core's ports (scheduler.k8s.ports.adapter, evictions) ----------------------------------------------------
    Call(
        "adapter",
        "CoreV1Api",
        "patch_namespaced_pod_status",
        "",
        "pods/status",
        ("patch",),
        "a preemptor's nominatedNodeName; a victim's DisruptionTarget condition",
    ),
    Call("adapter", "CoreV1Api", "delete_namespaced_pod", "", "pods", ("delete",), "preemption deletes its victims"),
    Call(
        "adapter",
        "CoreV1Api",
        "read_namespaced_pod",
        "",
        "pods",
        ("get",),
        "a binding's outcome still unknown after the watch: is the pod bound?",
    ),
    Call(
        "evictions",
        "CoreV1Api",
        "create_namespaced_pod_eviction",
        "",
        "pods/eviction",
        ("create",),
        "consolidation moves pods through the Eviction API, so that PodDisruptionBudgets hold",
    ),
    # --- Events (scheduler.k8s.ports.events) --------------------------------------------------------------------------
    Call(
        "events",
        "CoreV1Api",
        "create_namespaced_event",
        "",
        "events",
        ("create",),
        "Scheduled, FailedScheduling, Preempted... on pods, gangs and objects that cannot be read",
    ),
    Call("events", "CoreV1Api", "patch_namespaced_event", "", "events", ("patch",), "a repeated Event's count"),
    # --- the client (scheduler.k8s.client): the writes of a pod bound, sent straight (DIRECT) --------------------
    Call("client", "CoreV1Api", "create_namespaced_pod_binding", "", "pods/binding", ("create",), "the binder's bind"),
    Call("client", "CoreV1Api", "create_namespaced_event", "", "events", ("create",), "the Events writer's new Event"),
    Call(
        "client",
        "ResourceV1Api",
        "patch_namespaced_resource_claim",
        "resource.k8s.io",
        "resourceclaims",
        ("patch",),
        "the claim writer's finalizer on a claim it allocates",
    ),
    Call(
        "client",
        "ResourceV1Api",
        "patch_namespaced_resource_claim_status",
        "resource.k8s.io",
        "resourceclaims/status",
        ("patch",),
        "the claim writer's allocation and reservedFor",
    ),
    # --- status (scheduler.k8s.status) -----------------------------------------------------------------------------
    Call(
        "status",
        "CoreV1Api",
        "patch_namespaced_pod_status",
        "",
        "pods/status",
        ("patch",),
        "an unschedulable pod's PodScheduled=False condition and why",
    ),
    Call(
        "status",
        "CustomObjectsApi",
        "patch_namespaced_custom_object_status",
        "scheduling.gpusched.io",
        "podgroups/status",
        ("patch",),
        "a gang's phase and conditions",
    ),
    Call(
        "status",
        "CustomObjectsApi",
        "patch_namespaced_custom_object_status",
        "scheduling.gpusched.io",
        "reservations/status",
        ("patch",),
        "a Reservation's phase, nodes and conditions",
    ),
    Call(
        "status",
        "CustomObjectsApi",
        "patch_cluster_custom_object_status",
        "scheduling.gpusched.io",
        "queues/status",
        ("patch",),
        "a queue's usage, share and waiting work",
    ),
    Call(
        "status",
        "CustomObjectsApi",
        "patch_cluster_custom_object_status",
        "scheduling.gpusched.io",
        "topologies/status",
        ("patch",),
        "whether the Topology is accepted, and its levels' domains",
    ),
    # --- PodGroups for workloads (scheduler.k8s.feeds.grouper): a pod's owners, up to its workload --------------------
    Call("grouper", "CoreV1Api", "read_namespaced_pod", "", "pods", ("get",), "a LeaderWorkerSet's leader pod"),
    *(
        Call("grouper", "CustomObjectsApi", "get_namespaced_custom_object", group, plural, ("get",), why)
        for group, plural, why in (
            ("apps", "replicasets", "a pod's owner on its way to a Deployment"),
            ("apps", "deployments", "a pod's owner chain"),
            ("apps", "statefulsets", "a LeaderWorkerSet's StatefulSets"),
            ("batch", "jobs", "a Job is one gang"),
            ("jobset.x-k8s.io", "jobsets", "a JobSet is one gang"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets", "a LeaderWorkerSet group is one gang"),
            ("trainer.kubeflow.org", "trainjobs", "a TrainJob is one gang"),
            ("kubeflow.org", "pytorchjobs", "a PyTorchJob is one gang"),
            ("kubeflow.org", "mpijobs", "an MPIJob is one gang"),
            ("ray.io", "rayclusters", "a RayCluster is one gang"),
        )
    ),
    Call(
        "grouper",
        "CustomObjectsApi",
        "create_namespaced_custom_object",
        "scheduling.gpusched.io",
        "podgroups",
        ("create",),
        "one PodGroup per workload, owned by it (the garbage collector deletes it with the workload)",
    ),
    # --- volumes' PreBind (scheduler.k8s.ports.volume_binding) --------------------------------------------------------
    Call(
        "volume_binding",
        "CoreV1Api",
        "read_namespaced_persistent_volume_claim",
        "",
        "persistentvolumeclaims",
        ("get",),
        "a claim's current version before it is annotated",
    ),
    Call(
        "volume_binding",
        "CoreV1Api",
        "read_persistent_volume",
        "",
        "persistentvolumes",
        ("get",),
        "a static volume's current version before its claimRef is set",
    ),
    Call(
        "volume_binding",
        "CoreV1Api",
        "patch_persistent_volume",
        "",
        "persistentvolumes",
        ("patch",),
        "a static volume's claimRef",
    ),
    Call(
        "volume_binding",
        "CoreV1Api",
        "patch_namespaced_persistent_volume_claim",
        "",
        "persistentvolumeclaims",
        ("patch",),
        "the selected-node annotation a provisioner waits for",
    ),
    # --- DRA's PreBind and its undo (scheduler.k8s.ports.device_claims) -----------------------------------------------
    Call(
        "device_claims",
        "ResourceV1Api",
        "create_namespaced_resource_claim",
        "resource.k8s.io",
        "resourceclaims",
        ("create",),
        "the claim for a pod's extended resources backed by DRA",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "patch_namespaced_resource_claim",
        "resource.k8s.io",
        "resourceclaims",
        ("patch",),
        "the scheduler's finalizer on a claim it allocates, taken off on undo",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "patch_namespaced_resource_claim_status",
        "resource.k8s.io",
        "resourceclaims/status",
        ("patch",),
        "the allocation and the pod in status.reservedFor",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "replace_namespaced_resource_claim_status",
        "resource.k8s.io",
        "resourceclaims/status",
        ("update",),
        "undo: the allocation taken back, with the claim's version as a precondition",
    ),
    *(
        Call(
            "device_claims",
            "ResourceV1Api",
            method,
            "resource.k8s.io",
            "resourceclaims/binding",
            (verb,),
            "writing a claim's allocation or reservedFor",
            checked="the API server asks for this synthetic subresource, with the request's verb, before it lets a "
            "status write change status.allocation or status.reservedFor (Kubernetes 1.36, the suite's version, "
            "does); without it every DRA bind is refused",
        )
        for method, verb in (
            ("patch_namespaced_resource_claim_status", "patch"),
            ("replace_namespaced_resource_claim_status", "update"),
        )
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "read_namespaced_resource_claim",
        "resource.k8s.io",
        "resourceclaims",
        ("get",),
        "a claim's current version for the undo",
    ),
    Call(
        "device_claims",
        "ResourceV1Api",
        "delete_namespaced_resource_claim",
        "resource.k8s.io",
        "resourceclaims",
        ("delete",),
        "the extended resources' claim, when the binding fails",
    ),
    Call(
        "device_claims",
        "CoreV1Api",
        "patch_namespaced_pod_status",
        "",
        "pods/status",
        ("patch",),
        "status.extendedResourceClaimStatus: the claim that backs a pod's extended resources",
    ),
    # --- leader election (scheduler.k8s.leader): one Lease in the scheduler's namespace ----------------------------
    Call(
        "leader",
        "CoordinationV1Api",
        "read_namespaced_lease",
        "coordination.k8s.io",
        "leases",
        ("get",),
        "who holds the Lease",
        rights=LEASE,
        named=True,
    ),
    Call(
        "leader",
        "CoordinationV1Api",
        "create_namespaced_lease",
        "coordination.k8s.io",
        "leases",
        ("create",),
        "the first replica makes the Lease (create cannot be narrowed to a name)",
        rights=LEASE,
    ),
    Call(
        "leader",
        "CoordinationV1Api",
        "replace_namespaced_lease",
        "coordination.k8s.io",
        "leases",
        ("update",),
        "take, renew and release the Lease",
        rights=LEASE,
        named=True,
    ),
    # --- who asks /explain, and who opens the dashboard (scheduler.k8s.serve.access) ----------------------------------
    Call(
        "access",
        "AuthenticationV1Api",
        "create_token_review",
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "who the caller of /explain, or a dashboard viewer, is (their token)",
        rights=AUTH_DELEGATOR,
    ),
    Call(
        "access",
        "AuthorizationV1Api",
        "create_subject_access_review",
        "authorization.k8s.io",
        "subjectaccessreviews",
        ("create",),
        "whether the caller may read what /explain tells (a pod, a gang, a queue), or a viewer open the dashboard",
        rights=AUTH_DELEGATOR,
    ),
    # --- gpusched explain: the person's own credentials ------------------------------------------------------------
    Call(
        "explain",
        "CoordinationV1Api",
        "read_namespaced_lease",
        "coordination.k8s.io",
        "leases",
        ("get",),
        "which replica leads",
        rights=USER,
    ),
    Call("explain", "CoreV1Api", "list_namespaced_pod", "", "pods", ("list",), "the scheduler's pods", rights=USER),
    Call(
        "explain",
        "CoreV1Api",
        "connect_get_namespaced_pod_proxy_with_path",
        "",
        "pods/proxy",
        ("get",),
        "the leader's /explain through the API server's pod proxy",
        rights=USER,
    ),
    # --- gpusched snapshot: the person's own credentials, lists only (scheduler.k8s.snapshot) -----------------------
    Call("snapshot", "CoreV1Api", "list_node", "", "nodes", ("list",), "the nodes the simulator runs on", rights=USER),
    Call(
        "snapshot",
        "CoreV1Api",
        "list_pod_for_all_namespaces",
        "",
        "pods",
        ("list",),
        "the pods on nodes and the pending ones",
        rights=USER,
    ),
    Call(
        "snapshot",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        "scheduling.gpusched.io",
        "podgroups",
        ("list",),
        "the gangs of the pending pods",
        rights=USER,
    ),
    Call(
        "snapshot",
        "CustomObjectsApi",
        "list_cluster_custom_object",
        "scheduling.gpusched.io",
        "queues",
        ("list",),
        "the queues the pods are charged to",
        rights=USER,
    ),
)
