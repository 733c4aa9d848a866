"""A container's probes as the allocation's DMS health check.

Liveness first, else readiness, else startup: the DMS restarts an allocation whose check keeps
failing, which is what Kubernetes does for liveness. Every probe with its timings is also
recorded in the ensemble metadata (:data:`~.names.METADATA_PROBES_PREFIX`).
"""

from __future__ import annotations

import json
from typing import Any

from ...behaviors.ensemble import HealthCheckManifest
from .. import k8s
from .checks import PodTranslationError, check_extras
from .inputs import Container

_PROBE_KINDS = (
    ("liveness", "liveness_probe"),
    ("readiness", "readiness_probe"),
    ("startup", "startup_probe"),
)


def _port(c: Container, port: int | str, path: str) -> int:
    if isinstance(port, int):
        if not 0 < port <= 65535:
            raise PodTranslationError(path, f"{port} is not a port number")
        return port
    for p in c.spec.ports:
        if p.name == port:
            return p.container_port
    raise PodTranslationError(path, f"the container has no port named {port!r}")


def _probe_check(c: Container, probe: k8s.Probe, path: str) -> tuple[HealthCheckManifest, str]:
    """The DMS health check running the probe's handler, and a short description of it."""
    check_extras(probe, path)
    handlers = [h for h in (probe.exec, probe.http_get, probe.tcp_socket) if h is not None]
    if len(handlers) != 1:
        raise PodTranslationError(path, "a probe needs exactly one of exec, httpGet, tcpSocket")
    interval = probe.period_seconds * 1_000_000_000
    if probe.exec is not None:
        if not probe.exec.command:
            raise PodTranslationError(f"{path}.exec.command", "required")
        return HealthCheckManifest(
            type="command", exec=tuple(probe.exec.command), interval=interval
        ), "exec"
    if probe.http_get is not None:
        get = probe.http_get
        check_extras(get, f"{path}.httpGet")
        if get.http_headers:
            raise PodTranslationError(
                f"{path}.httpGet.httpHeaders", "not supported by DMS health checks"
            )
        port = _port(c, get.port, f"{path}.httpGet.port")
        target = get.path if get.path.startswith("/") else "/" + get.path
        endpoint = f"{get.scheme.lower()}://{get.host or '127.0.0.1'}:{port}{target}"
        return HealthCheckManifest(type="http", endpoint=endpoint, interval=interval), "httpGet"
    assert probe.tcp_socket is not None
    tcp = probe.tcp_socket
    check_extras(tcp, f"{path}.tcpSocket")
    port = _port(c, tcp.port, f"{path}.tcpSocket.port")
    argv = ("nc", "-z", tcp.host or "127.0.0.1", str(port))
    return HealthCheckManifest(type="command", exec=argv, interval=interval), "tcpSocket"


def health_check(c: Container) -> tuple[HealthCheckManifest, str]:
    """The DMS health check (liveness first: the DMS restarts an allocation whose check keeps
    failing, which is what Kubernetes does for liveness) and the metadata record of every probe
    (``""`` when there is none)."""
    checks: list[tuple[str, HealthCheckManifest]] = []
    record: dict[str, Any] = {}
    for kind, attr in _PROBE_KINDS:
        probe = getattr(c.spec, attr)
        if probe is None:
            continue
        check, handler = _probe_check(c, probe, f"{c.path}.{kind}Probe")
        checks.append((kind, check))
        record[kind] = {
            "handler": handler,
            "initialDelaySeconds": probe.initial_delay_seconds,
            "periodSeconds": probe.period_seconds,
            "timeoutSeconds": probe.timeout_seconds,
            "successThreshold": probe.success_threshold,
            "failureThreshold": probe.failure_threshold,
        }
    if not checks:
        return HealthCheckManifest(), ""
    record["check"] = checks[0][0]
    return checks[0][1], json.dumps(record, sort_keys=True, separators=(",", ":"))
