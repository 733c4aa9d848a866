"""Where a pod's services can be reached, and the per-pod JSON the operator port serves.

The DMS publishes each of the node's ``ports`` (``PortConfig``: public port, private port,
allocation) on the peer the node landed on; its manifest names, per allocation, the ports
(``ports``: public -> private) and its ensemble-internal name (``dns_name``), and per node the
peer and its public address (``pub_address``). An endpoint is one container port as a user
reaches it: that address and the public port. The DMS gives no public DNS name (its
``dns_name`` resolves inside the ensemble's private network only), so it is reported as
``internalDNS`` beside the endpoint, never as its address.

Pure functions over the manifest and the pod, so the endpoints and the pod's placement (the
ensemble node and the peer running it) can be computed once when a deployment runs
(:func:`endpoints_of`, :func:`placement_of`), kept in the record (under :data:`ENDPOINTS_KEY`
and :data:`PLACEMENT_KEY`), and read without a DMS round trip by every view of the pod
(:mod:`..reports.pod_view`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...behaviors.status import EnsembleManifest
from ..translate import allocation_key
from ..wire import k8s

ENDPOINTS_KEY = "endpoints"
"""Where a record's ``observed`` keeps its endpoints (plain JSON, as :func:`endpoints_of`)."""
PLACEMENT_KEY = "placement"
"""Where a record's ``observed`` keeps where the pod runs (plain JSON, as :func:`placement_of`)."""


def has_ports(pod: k8s.Pod) -> bool:
    """Whether any container declares a port: only then is there an endpoint to look up."""
    return any(c.ports for c in (*pod.spec.init_containers, *pod.spec.containers))


def endpoints_of(pod: k8s.Pod, manifest: EnsembleManifest) -> list[dict[str, Any]]:
    """Each container port the manifest publishes, in the pod's order: the container, the
    port's name, ``containerPort``, protocol, the peer's ``address`` and public ``port``
    (``address`` is empty when the DMS names no public address for the peer), the ``peer``,
    and ``internalDNS``, the allocation's name inside the ensemble."""
    allocations = manifest.allocations or {}
    nodes = manifest.nodes or {}
    found = []
    for c in (*pod.spec.init_containers, *pod.spec.containers):
        allocation = allocations.get(allocation_key(c.name))
        if allocation is None:
            continue
        publics = _publics_by_private(allocation.ports or {})
        node = nodes.get(allocation.node_id)
        addresses = (node.pub_address or ()) if node is not None else ()
        for port in c.ports:
            public = _take(publics.get(port.container_port, []), port.host_port)
            if public is None:
                continue
            found.append(
                {
                    "container": c.name,
                    "name": port.name,
                    "containerPort": port.container_port,
                    "protocol": port.protocol,
                    "address": addresses[0] if addresses else "",
                    "port": public,
                    "peer": node.peer if node is not None else "",
                    "internalDNS": allocation.dns_name,
                }
            )
    return found


def _publics_by_private(ports: Mapping[Any, int]) -> dict[int, list[int]]:
    """The manifest's ``public -> private`` map turned around: several public ports may lead
    to one private port (two entries of one ``containerPort``), each must be reported once."""
    found: dict[int, list[int]] = {}
    for public, private in sorted((int(public), private) for public, private in ports.items()):
        found.setdefault(private, []).append(public)
    return found


def _take(publics: list[int], host_port: int | None) -> int | None:
    """The public port of one entry: its ``hostPort`` if published, else the lowest left."""
    if host_port in publics:
        publics.remove(host_port)
        return host_port
    return publics.pop(0) if publics else None


def placement_of(pod: k8s.Pod, manifest: EnsembleManifest) -> dict[str, str] | None:
    """Where the pod runs: the ensemble ``node`` and the provider's ``peer`` (its libp2p host)
    of its first placed container, init containers first (``None``: none is placed)."""
    allocations = manifest.allocations or {}
    for c in (*pod.spec.init_containers, *pod.spec.containers):
        allocation = allocations.get(allocation_key(c.name))
        if allocation is not None:
            return {"node": allocation.node_id, "peer": allocation.handle.addr.host}
    return None


def describe(endpoints: Sequence[Mapping[str, Any]]) -> str:
    """One line for the log: ``web:8080 -> 127.0.0.1:40123, …``."""
    return ", ".join(
        f"{e['container']}:{e['containerPort']} -> "
        f"{e['address'] or 'peer ' + str(e['peer'])}:{e['port']}"
        for e in endpoints
    )


def where_it_runs(
    pod: k8s.Pod, manifest: EnsembleManifest
) -> tuple[dict[str, str] | None, list[dict[str, Any]] | None]:
    """Where a running deployment runs, and its endpoints (``None``: the pod has no ports).
    A function of its own, so that the follower's loop keeps no parsed pod between polls."""
    return placement_of(pod, manifest), endpoints_of(pod, manifest) if has_ports(pod) else None
