"""Host ports a pod takes on its node, read and compared as kube-scheduler's NodePorts plugin does.

A container port with ``hostPort`` > 0 binds that port on the node; the app containers' and the sidecars' (init
containers with ``restartPolicy: Always``, which run as long as the pod) count, plain init containers do not.
The protocol defaults to TCP and the host IP to ``0.0.0.0`` (every address). Two ports conflict when protocol
and port are equal and either host IP is ``0.0.0.0`` or both are the same address.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.basics.errors import InvalidObject

#: The host IP of a port bound on every address of the node.
ANY_IP = "0.0.0.0"
_PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    protocol: str
    port: int
    ip: str = ANY_IP

    def conflicts(self, other: HostPort) -> bool:
        if self.protocol != other.protocol or self.port != other.port:
            return False
        return self.ip == ANY_IP or other.ip == ANY_IP or self.ip == other.ip


def parse_host_ports(spec: Mapping[str, object], *, obj: str) -> tuple[HostPort, ...]:
    """The distinct host ports of a pod spec (containers and sidecars), in a stable order."""
    found: set[HostPort] = set()
    for where in ("containers", "initContainers"):
        containers = spec.get(where)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            if where == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            ports = container.get("ports")
            if ports is None:
                continue
            if not isinstance(ports, list):
                raise InvalidObject("expected a list of ports", obj=obj, field=f"spec.{where}[{i}].ports")
            for j, port in enumerate(ports):
                field = f"spec.{where}[{i}].ports[{j}]"
                if not isinstance(port, Mapping):
                    raise InvalidObject("expected a port", obj=obj, field=field)
                host_port = port.get("hostPort") or 0
                if not isinstance(host_port, int) or isinstance(host_port, bool) or not 0 <= host_port <= 65535:
                    raise InvalidObject(f"{host_port!r} is not a port 1..65535", obj=obj, field=f"{field}.hostPort")
                if not host_port:
                    continue
                protocol = str(port.get("protocol") or "TCP")
                if protocol not in _PROTOCOLS:
                    raise InvalidObject(
                        f"{protocol!r} is not one of {', '.join(_PROTOCOLS)}", obj=obj, field=f"{field}.protocol"
                    )
                found.add(HostPort(protocol, host_port, str(port.get("hostIP") or ANY_IP)))
    return tuple(sorted(found))


def conflicting(wanted: tuple[HostPort, ...], used: tuple[HostPort, ...]) -> bool:
    """Whether any of ``wanted`` conflicts with any of ``used`` (the NodePorts rule)."""
    return any(w.conflicts(u) for w in wanted for u in used)
