"""The suite reads what request a refusal in gpusched's log names (kube.refused_request), so that a scenario fails
only for a right the ServiceAccount still lacks. No cluster needed: the lines are as gpusched logs them."""

from __future__ import annotations

import json

from tests.e2e.kube import refused_request

SA = "system:serviceaccount:gpusched-system:gpusched"
GROUPS = ["system:authenticated", "system:serviceaccounts", "system:serviceaccounts:gpusched-system"]


def _line(error: str, **fields: str) -> str:
    return json.dumps({**fields, "error": error, "event": "status write refused", "level": "warning"})


def _asks(verb: str, group: str, resource: str, **more: str) -> dict[str, object]:
    """The SubjectAccessReview spec of the ServiceAccount asking ``verb`` on ``resource`` (``more``: subresource,
    namespace, name; empty when not said)."""
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": "", "namespace": "", "name": ""}
    return {"user": SA, "groups": GROUPS, "resourceAttributes": attributes | more}


def test_a_namespaced_write_of_a_subresource() -> None:
    line = _line(
        f'podgroups.scheduling.gpusched.io "g04" is forbidden: User "{SA}" cannot patch resource "podgroups/status" '
        'in API group "scheduling.gpusched.io" in the namespace "team-a"'
    )
    group = "scheduling.gpusched.io"
    expected = _asks("patch", group, "podgroups", subresource="status", namespace="team-a", name="g04")
    assert refused_request(line) == expected


def test_a_cluster_scoped_list_of_the_core_group() -> None:
    line = _line(f'nodes is forbidden: User "{SA}" cannot list resource "nodes" in API group "" at the cluster scope')
    assert refused_request(line) == _asks("list", "", "nodes")


def test_an_answer_inside_the_line_cut_short_is_read_from_its_object_at_cluster_scope() -> None:
    answer = json.dumps(
        {"kind": "Status", "message": f'csinodes.storage.k8s.io is forbidden: User "{SA}" cannot watch resource "csi'}
    )
    line = _line(f"ClientError: watch csinodes: HTTP 403 b'{answer}'")
    assert refused_request(line) == _asks("watch", "storage.k8s.io", "csinodes")


def test_a_lease_refused_by_name() -> None:
    line = _line(
        f'leases.coordination.k8s.io "gpusched" is forbidden: User "{SA}" cannot get resource "leases" in API group '
        '"coordination.k8s.io" in the namespace "gpusched-system": RBAC: [clusterrole.rbac.authorization.k8s.io '
        '"gpusched" not found]'
    )
    spec = refused_request(line)
    assert spec is not None
    assert spec["resourceAttributes"]["name"] == "gpusched"
    assert spec["resourceAttributes"]["namespace"] == "gpusched-system"


def test_a_line_without_a_refusal_names_no_request() -> None:
    assert refused_request(_line('events "x" is forbidden: unable to create new content in namespace t')) is None
