"""A container's probes: run by the pod wrapper with the kubelet's semantics, or, for a
container that runs unwrapped, its liveness probe as the allocation's DMS health check.

The DMS runs one health check per allocation and restarts the allocation when it keeps
failing: that is a liveness probe, and nothing more (no startup or readiness semantics, no
thresholds). So a wrapped container's probes all run in its wrapper
(:mod:`.wrapper`, decision 41), which can reach the container where the DMS cannot; an
unwrapped container's liveness probe becomes the DMS health check, and its readiness or
startup probe is refused with the reason. Every probe with its timings is also recorded in
the ensemble metadata (:data:`~.names.METADATA_PROBES_PREFIX`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ...behaviors.ensemble import HealthCheckManifest
from ..wire import k8s
from .checks import PodTranslationError, check_extras
from .inputs import Container

_PROBE_KINDS = (
    ("startup", "startup_probe"),
    ("liveness", "liveness_probe"),
    ("readiness", "readiness_probe"),
)


@dataclasses.dataclass(frozen=True, slots=True)
class ProbeRun:
    """A probe as the wrapper runs it: its ``kind`` (``startup``, ``liveness`` or
    ``readiness``), its ``handler`` (``exec``, ``httpGet`` or ``tcpSocket``) and ``target``
    (the command; the URL; the host and port), and the kubelet's timings."""

    kind: str
    handler: str
    target: tuple[str, ...]
    initial_delay_s: int
    period_s: int
    timeout_s: int
    success_threshold: int
    failure_threshold: int


def _port(c: Container, port: int | str, path: str) -> int:
    if isinstance(port, int):
        if not 0 < port <= 65535:
            raise PodTranslationError(path, f"{port} is not a port number")
        return port
    for p in c.spec.ports:
        if p.name == port:
            return p.container_port
    raise PodTranslationError(path, f"the container has no port named {port!r}")


def _handler(c: Container, probe: k8s.Probe, path: str) -> tuple[str, tuple[str, ...]]:
    """The probe's handler and its target (see :class:`ProbeRun`)."""
    handlers = [h for h in (probe.exec, probe.http_get, probe.tcp_socket) if h is not None]
    if len(handlers) != 1:
        raise PodTranslationError(path, "a probe needs exactly one of exec, httpGet, tcpSocket")
    if probe.exec is not None:
        if not probe.exec.command:
            raise PodTranslationError(f"{path}.exec.command", "required")
        return "exec", tuple(probe.exec.command)
    if probe.http_get is not None:
        get = probe.http_get
        check_extras(get, f"{path}.httpGet")
        if get.http_headers:
            raise PodTranslationError(f"{path}.httpGet.httpHeaders", "not supported")
        port = _port(c, get.port, f"{path}.httpGet.port")
        target = get.path if get.path.startswith("/") else "/" + get.path
        return "httpGet", (f"{get.scheme.lower()}://{get.host or '127.0.0.1'}:{port}{target}",)
    assert probe.tcp_socket is not None
    tcp = probe.tcp_socket
    check_extras(tcp, f"{path}.tcpSocket")
    port = _port(c, tcp.port, f"{path}.tcpSocket.port")
    return "tcpSocket", (tcp.host or "127.0.0.1", str(port))


def _probe_run(c: Container, kind: str, probe: k8s.Probe, path: str) -> ProbeRun:
    """The probe checked as the API server checks it (it may come from anywhere)."""
    check_extras(probe, path)
    handler, target = _handler(c, probe, path)
    for field in ("periodSeconds", "timeoutSeconds", "successThreshold", "failureThreshold"):
        if getattr(probe, _snake(field)) < 1:
            raise PodTranslationError(f"{path}.{field}", "must be at least 1")
    if kind != "readiness" and probe.success_threshold != 1:
        raise PodTranslationError(f"{path}.successThreshold", f"must be 1 for a {kind} probe")
    return ProbeRun(
        kind=kind,
        handler=handler,
        target=target,
        initial_delay_s=probe.initial_delay_seconds,
        period_s=probe.period_seconds,
        timeout_s=probe.timeout_seconds,
        success_threshold=probe.success_threshold,
        failure_threshold=probe.failure_threshold,
    )


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name)


def probe_runs(c: Container) -> list[ProbeRun]:
    """The container's probes, startup first; :class:`PodTranslationError` names what the
    API server would have refused, and a probe on an init container (which has none in
    Kubernetes)."""
    runs = []
    for kind, attr in _PROBE_KINDS:
        probe = getattr(c.spec, attr)
        if probe is None:
            continue
        path = f"{c.path}.{kind}Probe"
        if c.init_index is not None:
            raise PodTranslationError(path, "an init container has no probes")
        runs.append(_probe_run(c, kind, probe, path))
    return runs


def health_check(c: Container, *, wrapped: bool) -> tuple[HealthCheckManifest, str]:
    """The DMS health check (the liveness probe of an unwrapped container: the DMS restarts
    an allocation whose check keeps failing; none for a wrapped one, whose wrapper runs every
    probe) and the metadata record of every probe (``""`` when there is none)."""
    runs = probe_runs(c)
    record: dict[str, Any] = {
        run.kind: {
            "handler": run.handler,
            "initialDelaySeconds": run.initial_delay_s,
            "periodSeconds": run.period_s,
            "timeoutSeconds": run.timeout_s,
            "successThreshold": run.success_threshold,
            "failureThreshold": run.failure_threshold,
        }
        for run in runs
    }
    if not runs:
        return HealthCheckManifest(), ""
    check = HealthCheckManifest()
    if wrapped:
        record["runner"] = "wrapper"
    else:
        check = _unwrapped_check(c, runs)
        record["runner"] = "dms"
    return check, json.dumps(record, sort_keys=True, separators=(",", ":"))


def _unwrapped_check(c: Container, runs: list[ProbeRun]) -> HealthCheckManifest:
    """An unwrapped container's liveness probe as the DMS health check; any other probe of
    it is refused: it could run only as a check that restarts the container."""
    for run in runs:
        if run.kind != "liveness":
            raise PodTranslationError(
                f"{c.path}.{run.kind}Probe",
                "not supported for a container that runs unwrapped (without a command, or "
                "named in the pod's dmsgw.io/unwrapped-containers): the gateway runs readiness "
                "and startup probes in its wrapper around the container's command, and the "
                "DMS's own health check can only stand for a livenessProbe",
            )
    (live,) = runs
    interval = live.period_s * 1_000_000_000
    if live.handler == "exec":
        return HealthCheckManifest(type="command", exec=live.target, interval=interval)
    if live.handler == "httpGet":
        return HealthCheckManifest(type="http", endpoint=live.target[0], interval=interval)
    return HealthCheckManifest(type="command", exec=("nc", "-z", *live.target), interval=interval)
