"""Check an ensemble the way the DMS does, but report every problem, each with its path.

The rules are those of the newest ``dms/jobs/parser/ensemblev1/validate.go`` (which the DMS
CLI runs on ensemble files) restated for the typed configuration, plus a few the DMS only
discovers while deploying: an allocation placed on no node, an allocation type other than
``service``/``task``, a private port out of range. Where the Go code tests whether a YAML key
is present, the typed form can only test for the zero value; a YAML file also goes through the
DMS's own checks on its keys first (:mod:`.ensemble_checks`).

Paths are relative to ``v1``: ``allocations.alloc1.resources.ram.size: must be > 0``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import DmsgwError
from .ensemble import (
    AllocationConfig,
    AllocationFailureRecovery,
    AllocationType,
    EnsembleConfig,
    EnsembleConfigV1,
    EscalationStrategy,
    Executor,
    KeyType,
    Location,
    NodeConfig,
    NodeFailureRecovery,
    SpecConfig,
    SupervisorConfig,
    SupervisorStrategy,
    VolumeConfig,
)

__all__ = [
    "EnsembleError",
    "EnsembleValidationError",
    "Problem",
    "check_ensemble",
    "validate_ensemble",
]

# utils/validate/strings.go
DNS_NAME = re.compile(
    r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"
)
DOCKER_IMAGE = re.compile(
    r"(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::\d+)?)/)?(?:[a-z0-9]+(?:(?:[._-][a-z0-9]+)*)/)*[a-z0-9]+(?:(?:[._-][a-z0-9]+)*)?"
    r"(?::[a-zA-Z0-9]+(?:(?:[._-][a-zA-Z0-9]+)*)?)?",
    re.ASCII,
)
ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
NAMED_VOLUME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")
_HEALTHCHECK_TYPES = ("http", "command")
_VOLUME_TYPES = ("glusterfs", "local")


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an ensemble, at a dotted path (``nodes.n1.ports[0].public``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class EnsembleError(DmsgwError):
    """An ensemble that cannot be deployed; ``problems`` lists each reason with its path."""

    def __init__(self, problems: Sequence[Problem], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        prefix = f"{source}: " if source else ""
        if len(self.problems) == 1:
            text = f"{prefix}{self.problems[0]}"
        else:
            lines = "".join(f"\n  {p}" for p in self.problems)
            text = f"{prefix}{len(self.problems)} problems:{lines}"
        super().__init__(text)


class EnsembleValidationError(EnsembleError):
    """The configuration breaks a rule the DMS enforces."""


def check_ensemble(config: EnsembleConfig) -> None:
    """Raise :class:`EnsembleValidationError` unless :func:`validate_ensemble` finds nothing."""
    problems = validate_ensemble(config)
    if problems:
        raise EnsembleValidationError(problems)


def validate_ensemble(config: EnsembleConfig) -> tuple[Problem, ...]:
    """Every problem the DMS would object to, in a stable order."""
    if config.v1 is None:
        return (Problem("v1", "missing: the DMS refuses an ensemble without a v1 section"),)
    return tuple(_Checker(config.v1).run())


def _one_of(value: str, allowed: Sequence[str]) -> str:
    return f"{value!r} is not one of {', '.join(allowed)}"


def _values(choices: type[enum.StrEnum]) -> tuple[str, ...]:
    """The plain string values (``in`` on the enum class itself is a TypeError in 3.11)."""
    return tuple(choice.value for choice in choices)


_ESCALATION = _values(EscalationStrategy)
_EXECUTORS = _values(Executor)
_ALLOCATION_TYPES = _values(AllocationType)
_ALLOCATION_RECOVERY = _values(AllocationFailureRecovery)
_NODE_RECOVERY = _values(NodeFailureRecovery)
_SUPERVISOR_STRATEGIES = _values(SupervisorStrategy)
_KEY_TYPES = _values(KeyType)


class _Checker:
    def __init__(self, spec: EnsembleConfigV1) -> None:
        self.spec = spec
        self.allocations: Mapping[str, AllocationConfig] = spec.allocations or {}
        self.nodes: Mapping[str, NodeConfig] = spec.nodes or {}

    def run(self) -> Iterator[Problem]:
        spec = self.spec
        if spec.escalation_strategy and spec.escalation_strategy not in _ESCALATION:
            yield Problem("escalation_strategy", _one_of(spec.escalation_strategy, _ESCALATION))
        if not self.allocations:
            yield Problem("allocations", "at least one allocation must be defined")
        yield from self._allocation_names()
        for name in sorted(self.allocations):
            yield from self._allocation(f"allocations.{name}", name, self.allocations[name])
        yield from self._dependency_cycles()
        yield from self._placement()
        for name in sorted(self.nodes):
            yield from self._node(f"nodes.{name}", self.nodes[name])
        for i, edge in enumerate(spec.edges or ()):
            path = f"edges[{i}]"
            if not edge.s or not edge.t:
                yield Problem(path, "an edge needs both nodes (s and t)")
            elif edge.s == edge.t:
                yield Problem(path, "source and target must be different nodes")
            for end in (edge.s, edge.t):
                if end and end not in self.nodes:
                    yield Problem(path, f"node {end!r} is not defined in nodes")
        yield from self._supervisor("supervisor", spec.supervisor)
        for name in sorted(spec.scripts or {}):
            if not name:
                yield Problem("scripts", "a script needs a name")
        for name in sorted(spec.contracts or {}):
            contract = (spec.contracts or {})[name]
            if not contract.did.startswith("did:"):
                yield Problem(f"contracts.{name}.did", "must be a DID (did:…)")
            if contract.host and not contract.host.startswith("did:"):
                yield Problem(f"contracts.{name}.host", "must be a DID (did:…)")

    def _allocation_names(self) -> Iterator[Problem]:
        lowered: dict[str, str] = {}
        dns_names: dict[str, str] = {}
        for name in sorted(self.allocations):
            if not DNS_NAME.fullmatch(name):
                yield Problem(f"allocations.{name}", "the name must be a valid hostname")
            other = lowered.setdefault(name.lower(), name)
            if other != name:
                yield Problem(
                    f"allocations.{name}", f"same name as {other!r} (names are case-insensitive)"
                )
            dns = self.allocations[name].dns_name
            if dns:
                first = dns_names.setdefault(dns, name)
                if first != name:
                    yield Problem(
                        f"allocations.{name}.dns_name", f"{dns!r} is already used by {first!r}"
                    )

    def _allocation(self, path: str, name: str, alloc: AllocationConfig) -> Iterator[Problem]:
        if not alloc.executor:
            yield Problem(f"{path}.executor", "required")
        elif alloc.executor not in _EXECUTORS:
            yield Problem(f"{path}.executor", _one_of(alloc.executor, _EXECUTORS))
        elif alloc.execution.type and alloc.execution.type != alloc.executor:
            yield Problem(
                f"{path}.execution.type",
                f"{alloc.execution.type!r} does not match the executor {alloc.executor!r}",
            )
        if not alloc.type:
            yield Problem(f"{path}.type", "required (service or task)")
        elif alloc.type not in _ALLOCATION_TYPES:
            yield Problem(f"{path}.type", _one_of(alloc.type, _ALLOCATION_TYPES))
        if alloc.dns_name and not DNS_NAME.fullmatch(alloc.dns_name):
            yield Problem(f"{path}.dns_name", f"{alloc.dns_name!r} is not a valid DNS name")
        if alloc.failure_recovery and alloc.failure_recovery not in _ALLOCATION_RECOVERY:
            yield Problem(
                f"{path}.failure_recovery", _one_of(alloc.failure_recovery, _ALLOCATION_RECOVERY)
            )
        for dep in alloc.depends_on or ():
            if dep == name:
                yield Problem(f"{path}.depends_on", "an allocation cannot depend on itself")
            elif dep not in self.allocations:
                yield Problem(f"{path}.depends_on", f"allocation {dep!r} is not defined")
        yield from _resources(f"{path}.resources", alloc)
        yield from _execution(f"{path}.execution", alloc.execution)
        for i, key in enumerate(alloc.keys or ()):
            key_path = f"{path}.keys[{i}]"
            if key.type not in _KEY_TYPES:
                yield Problem(f"{key_path}.type", _one_of(key.type, _KEY_TYPES))
            if not key.file:
                yield Problem(f"{key_path}.file", "required")
            if not key.dest and key.type != KeyType.SSH:
                yield Problem(f"{key_path}.dest", "required for keys other than ssh")
        scripts = self.spec.scripts or {}
        for i, script in enumerate(alloc.provision or ()):
            if script not in scripts:
                yield Problem(f"{path}.provision[{i}]", f"script {script!r} is not defined")
        if not alloc.healthcheck.is_empty():
            yield from _healthcheck(f"{path}.healthcheck", alloc)
        for i, volume in enumerate(alloc.volume or ()):
            yield from _volume(f"{path}.volume[{i}]", volume)

    def _dependency_cycles(self) -> Iterator[Problem]:
        state: dict[str, int] = {}  # 1: on the current path, 2: done
        for name in sorted(self.allocations):
            if name not in state:
                cycle = self._cycle_from(name, [], state)
                if cycle:
                    start = cycle.index(cycle[-1])
                    yield Problem(
                        f"allocations.{name}.depends_on",
                        "cyclic dependency: " + " -> ".join(cycle[start:]),
                    )

    def _cycle_from(self, name: str, trail: list[str], state: dict[str, int]) -> list[str] | None:
        """The first dependency cycle reached from ``name`` (depth first), if any. A method,
        not a closure that calls itself: such a closure is a reference cycle, and every
        ensemble checked would wait for the cyclic collector to be freed."""
        state[name] = 1
        for dep in self.allocations[name].depends_on or ():
            if dep not in self.allocations:
                continue
            if state.get(dep) == 1:
                return [*trail, name, dep]
            if dep not in state:
                cycle = self._cycle_from(dep, [*trail, name], state)
                if cycle:
                    return cycle
        state[name] = 2
        return None

    def _placement(self) -> Iterator[Problem]:
        placed: dict[str, str] = {}
        for node_name in sorted(self.nodes):
            node_allocs = self.nodes[node_name].allocations or ()
            for i, alloc_name in enumerate(node_allocs):
                path = f"nodes.{node_name}.allocations[{i}]"
                if alloc_name not in self.allocations:
                    yield Problem(path, f"allocation {alloc_name!r} is not defined")
                    continue
                first = placed.setdefault(alloc_name, node_name)
                if first != node_name:
                    yield Problem(
                        path, f"allocation {alloc_name!r} is already placed on node {first!r}"
                    )
                    continue
                for dep in self.allocations[alloc_name].depends_on or ():
                    if dep in self.allocations and dep not in node_allocs:
                        yield Problem(
                            f"allocations.{alloc_name}.depends_on",
                            f"{dep!r} must be on the same node ({node_name!r})",
                        )
        for name in sorted(self.allocations):
            if name not in placed:
                yield Problem(f"allocations.{name}", "not placed on any node")

    def _node(self, path: str, node: NodeConfig) -> Iterator[Problem]:
        if node.redundancy < 0:
            yield Problem(f"{path}.redundancy", "must not be negative")
        if node.failure_recovery and node.failure_recovery not in _NODE_RECOVERY:
            yield Problem(
                f"{path}.failure_recovery", _one_of(node.failure_recovery, _NODE_RECOVERY)
            )
        for i, port in enumerate(node.ports or ()):
            port_path = f"{path}.ports[{i}]"
            if not 0 < port.private <= 65535:
                yield Problem(f"{port_path}.private", "must be a port number (1-65535)")
            if port.public != 0 and not 1025 <= port.public <= 65535:
                yield Problem(f"{port_path}.public", "must be 0 (any) or within 1025-65535")
            if port.allocation and port.allocation not in self.allocations:
                yield Problem(
                    f"{port_path}.allocation", f"allocation {port.allocation!r} is not defined"
                )
        for kind, locations in (("accept", node.location.accept), ("reject", node.location.reject)):
            for i, location in enumerate(locations or ()):
                yield from _location(f"{path}.location.{kind}[{i}]", location)

    def _supervisor(self, path: str, supervisor: SupervisorConfig) -> Iterator[Problem]:
        if supervisor.strategy and supervisor.strategy not in _SUPERVISOR_STRATEGIES:
            yield Problem(f"{path}.strategy", _one_of(supervisor.strategy, _SUPERVISOR_STRATEGIES))
        for i, name in enumerate(supervisor.allocations or ()):
            if name not in self.allocations:
                yield Problem(f"{path}.allocations[{i}]", f"allocation {name!r} is not defined")
        for i, child in enumerate(supervisor.children or ()):
            yield from self._supervisor(f"{path}.children[{i}]", child)


def _resources(path: str, alloc: AllocationConfig) -> Iterator[Problem]:
    resources = alloc.resources
    if not resources.cpu.cores > 0:
        yield Problem(f"{path}.cpu.cores", "must be > 0")
    if resources.cpu.clock_speed < 0:
        yield Problem(f"{path}.cpu.clock_speed", "must be > 0")
    if not resources.ram.size > 0:
        yield Problem(f"{path}.ram.size", "must be > 0")
    if not resources.disk.size > 0:
        yield Problem(f"{path}.disk.size", "must be > 0")


def _execution(path: str, execution: SpecConfig) -> Iterator[Problem]:
    if not execution.type:
        yield Problem(f"{path}.type", "required")
        return
    if execution.type not in _EXECUTORS:
        yield Problem(f"{path}.type", _one_of(execution.type, _EXECUTORS))
        return
    params: Mapping[str, Any] = execution.params or {}
    if execution.type in (Executor.DOCKER, Executor.CONTAINERD):
        yield from _container_params(f"{path}.params", params, execution.type == Executor.DOCKER)
    elif execution.type == Executor.FIRECRACKER:
        for required in ("kernel_image", "root_file_system"):
            value = params.get(required)
            if not isinstance(value, str) or not value:
                yield Problem(f"{path}.params.{required}", "required for firecracker")


def _container_params(path: str, params: Mapping[str, Any], docker: bool) -> Iterator[Problem]:
    image = params.get("image")
    if not isinstance(image, str) or not image:
        yield Problem(f"{path}.image", "required")
    elif docker and not DOCKER_IMAGE.fullmatch(image):
        yield Problem(f"{path}.image", f"{image!r} is not a valid docker image reference")
    for key in ("entrypoint", "cmd"):
        value = params.get(key)
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    yield Problem(f"{path}.{key}[{i}]", "must be a string")
    environment = params.get("environment")
    if environment is not None:
        if not isinstance(environment, (list, tuple)):
            yield Problem(f"{path}.environment", 'must be a list of "KEY=VALUE" strings')
        else:
            for i, item in enumerate(environment):
                yield from _env_entry(f"{path}.environment[{i}]", item)
    policy = params.get("restart_policy")
    if isinstance(policy, str) and policy not in _RESTART_POLICIES:
        yield Problem(f"{path}.restart_policy", _one_of(policy, _RESTART_POLICIES))


def _env_entry(path: str, item: object) -> Iterator[Problem]:
    if not isinstance(item, str) or not item:
        yield Problem(path, 'must be a non-empty "KEY=VALUE" string')
        return
    key, sep, _ = item.partition("=")
    if not sep:
        yield Problem(path, f'{item!r} is not in "KEY=VALUE" form')
    elif not ENV_KEY.fullmatch(key):
        yield Problem(path, f"{key!r} is not a valid environment variable name")


def _healthcheck(path: str, alloc: AllocationConfig) -> Iterator[Problem]:
    check = alloc.healthcheck
    if check.type not in _HEALTHCHECK_TYPES:
        yield Problem(f"{path}.type", _one_of(check.type, _HEALTHCHECK_TYPES))
    elif check.type == "http" and not check.endpoint:
        yield Problem(f"{path}.endpoint", "required for an http health check")
    elif check.type == "command" and not check.exec:
        yield Problem(f"{path}.exec", "required for a command health check")
    if check.interval < 0:
        yield Problem(f"{path}.interval", "must not be negative")


def _volume(path: str, volume: VolumeConfig) -> Iterator[Problem]:
    if volume.type not in _VOLUME_TYPES:
        yield Problem(f"{path}.type", _one_of(volume.type, _VOLUME_TYPES))
    elif volume.type == "glusterfs":
        if not volume.servers:
            yield Problem(f"{path}.servers", "a glusterfs volume needs at least one server")
        for i, server in enumerate(volume.servers or ()):
            if not server:
                yield Problem(f"{path}.servers[{i}]", "must not be empty")
    elif not volume.src:
        yield Problem(f"{path}.src", "a local volume needs a source")
    elif "/" in volume.src:
        if not volume.src.startswith("/"):
            yield Problem(f"{path}.src", "a local path must be absolute")
    elif not NAMED_VOLUME.fullmatch(volume.src):
        yield Problem(f"{path}.src", f"{volume.src!r} is not a valid volume name")
    if not volume.mount_destination:
        yield Problem(f"{path}.mount_destination", "required")


def _location(path: str, location: Location) -> Iterator[Problem]:
    if not location.continent:
        yield Problem(f"{path}.continent", "required when giving a location")
    if location.city and not location.country:
        yield Problem(f"{path}.country", "required when a city is given")
