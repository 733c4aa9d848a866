"""The ensemble running a pod: one allocation per container on one node, and the metadata.

Init containers are ``task`` allocations; main containers are ``task``\\s, or ``service``\\s
under ``restartPolicy: Always``. Each init container depends on the previous one and every main
container on the last (the DMS's ``depends_on`` only orders *starts*; the provision scripts of
:mod:`.files` wait for completion). Identity and policy go into the metadata: the pod's UID and
name, ``restartPolicy`` (which the PodActor applies), the termination grace period and active
deadline. What the DMS would still refuse is named at the container it comes from.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ...behaviors.ensemble import (
    STOP_TIMEOUT_PARAM,
    AllocationConfig,
    AllocationFailureRecovery,
    AllocationType,
    EnsembleConfig,
    EnsembleConfigV1,
    NodeConfig,
    PortConfig,
    SpecConfig,
)
from ...behaviors.ensemble_validation import validate_ensemble
from ..wire import k8s
from ..wire.bodies import RetrievedPodData
from .checks import CONTAINER_IGNORED, PodTranslationError, check_extras, check_security_context
from .env import environment, expand
from .files import ProvisionScript, volume_configs
from .inputs import Container, TranslationOptions
from .names import (
    METADATA_ACTIVE_DEADLINE,
    METADATA_GENERATION,
    METADATA_GRACE_PERIOD,
    METADATA_POD_NAME,
    METADATA_POD_NAMESPACE,
    METADATA_POD_UID,
    METADATA_PROBES_PREFIX,
    METADATA_RESTART_POLICY,
    POD_NODE,
    completion_marker,
)
from .pod_context import PodContext, check_pod
from .pod_network import PodNetwork, check_wrapped, pod_network
from .pod_placement import peer_placement
from .probes import health_check, probe_runs
from .reservation import dms_resources
from .wrapper import (
    DEFAULT_GRACE_S,
    UNWRAPPED_ANNOTATION,
    WRAPPER_NAME,
    Hooks,
    check_unwrapped,
    is_wrapped,
    lifecycle_hooks,
    unwrapped,
    wrapper_script,
)

# --- ports -----------------------------------------------------------------------------------

DMS_PORT_RANGE = range(16384, 65536)
"""The public ports a DMS node hands out: its ``general.port_available_range_from/to``
(``dms/config``: 16384-65536 by default); a port outside it is refused at commit."""


def _published(c: Container, i: int, port: k8s.ContainerPort) -> str:
    """Check that the DMS can forward ``port``; the path naming it in an error."""
    path = f"{c.path}.ports[{i}]"
    check_extras(port, path)
    if port.protocol != "TCP":
        raise PodTranslationError(
            f"{path}.protocol",
            f"{port.protocol} is not forwarded: a DMS port mapping carries TCP only",
        )
    if port.host_ip:
        raise PodTranslationError(f"{path}.hostIP", "not supported: the DMS picks the address")
    if port.host_port and port.host_port not in DMS_PORT_RANGE:
        raise PodTranslationError(
            f"{path}.hostPort",
            f"must be within {DMS_PORT_RANGE.start}-{DMS_PORT_RANGE.stop - 1}, "
            "the public ports a DMS node gives",
        )
    return path


def _chosen_port(ctx: PodContext, c: Container, port: k8s.ContainerPort, used: set[int]) -> int:
    """A public port for a container port without ``hostPort``: the DMS would pick one
    (``public: 0``) but never reports which, so the gateway picks it, the same for the same pod,
    container, port and deployment (a later deployment moves off a port a peer had taken)."""
    seed = f"{ctx.uid}/{c.spec.name}/{port.container_port}/{ctx.options.generation}"
    digest = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    size = len(DMS_PORT_RANGE)
    for step in range(size):
        public = DMS_PORT_RANGE[(digest + step) % size]
        if public not in used:
            return public
    raise PodTranslationError(f"{c.path}.ports", "no public port is left")  # pragma: no cover


def _ports(ctx: PodContext) -> list[PortConfig]:
    """Every container port becomes a public port of the pod's node: its ``hostPort``, else
    one the gateway picks (:func:`_chosen_port`) among those no ``hostPort`` of the pod names."""
    used: dict[int, str] = {}
    for c in ctx.containers:
        names: dict[str, str] = {}
        for i, port in enumerate(c.spec.ports):
            path = _published(c, i, port)
            if port.name in names:  # a probe naming it would pick one of them silently
                raise PodTranslationError(
                    f"{path}.name", f"{port.name!r} is also {names[port.name]}"
                )
            if port.name:
                names[port.name] = f"{path}.name"
            if port.host_port in used:
                raise PodTranslationError(
                    f"{path}.hostPort", f"{port.host_port} is also {used[port.host_port]}"
                )
            if port.host_port:
                used[port.host_port] = f"{path}.hostPort"
    ports = []
    for c in ctx.containers:
        for port in c.spec.ports:
            public = port.host_port or _chosen_port(ctx, c, port, set(used))
            used[public] = c.path
            ports.append(PortConfig(public, port.container_port, c.spec.name))
    return ports


# --- allocations -----------------------------------------------------------------------------


def _policy(ctx: PodContext, c: Container) -> tuple[str, str]:
    """Allocation type and failure recovery for the pod's ``restartPolicy``: the DMS restarts a
    failed allocation in place (``one_for_one``) unless the policy is ``Never``; only main
    containers under ``Always`` are services (init containers always run to completion)."""
    policy = ctx.pod.spec.restart_policy
    recovery = (
        AllocationFailureRecovery.STAY_DOWN
        if policy == "Never"
        else AllocationFailureRecovery.ONE_FOR_ONE
    )
    kind = (
        AllocationType.SERVICE
        if policy == "Always" and c.init_index is None
        else AllocationType.TASK
    )
    return kind.value, recovery.value


def _execution(
    ctx: PodContext, c: Container, env: Mapping[str, str], hooks: Hooks, network: PodNetwork
) -> SpecConfig:
    spec = c.spec
    command = [expand(part, env) for part in spec.command]
    args = [expand(part, env) for part in spec.args]
    params: dict[str, Any] = {"image": spec.image}
    needs_wrapper = c.init_index is not None or hooks != Hooks()
    if needs_wrapper and not spec.command:
        raise PodTranslationError(
            f"{c.path}.command",
            "required: the gateway wraps the command of an init container or of a container "
            "with lifecycle hooks, and cannot wrap the image's own entrypoint",
        )
    if needs_wrapper and spec.name in unwrapped(ctx.pod):
        raise PodTranslationError(
            f"metadata.annotations[{json.dumps(UNWRAPPED_ANNOTATION)}]",
            f"{spec.name!r} cannot run unwrapped: the gateway runs an init container's or a "
            "lifecycle hook's ordering through its wrapper",
        )
    check_wrapped(network, c, is_wrapped(ctx.pod, spec))
    grace = ctx.pod.spec.termination_grace_period_seconds
    grace = DEFAULT_GRACE_S if grace is None else grace
    params[STOP_TIMEOUT_PARAM] = grace
    if is_wrapped(ctx.pod, spec):
        marker = completion_marker(spec.name) if c.init_index is not None else ""
        script = wrapper_script(c, hooks, marker, probe_runs(c), grace, network)
        params["entrypoint"] = ["/bin/sh", "-c", script, WRAPPER_NAME]
        params["cmd"] = command + args
    else:
        if command:
            params["entrypoint"] = command
        if args:
            params["cmd"] = args
    if env:
        params["environment"] = [f"{name}={value}" for name, value in env.items()]
    if spec.working_dir:
        if not spec.working_dir.startswith("/"):
            raise PodTranslationError(f"{c.path}.workingDir", "must be an absolute path")
        params["working_directory"] = spec.working_dir
    return SpecConfig(type=ctx.options.executor, params=params)


def _previous_init(ctx: PodContext, c: Container) -> str:
    """The init container that must complete before ``c`` starts (``""``: none)."""
    if c.init_index is None:
        return ctx.init_names[-1] if ctx.init_names else ""
    return ctx.init_names[c.init_index - 1] if c.init_index > 0 else ""


def _allocation(
    ctx: PodContext, c: Container, scripts: dict[str, bytes], network: PodNetwork
) -> tuple[AllocationConfig, str]:
    """The allocation running container ``c``, and its probe record for the metadata."""
    check_extras(c.spec, c.path, CONTAINER_IGNORED)
    check_security_context(c.spec, c.path)
    env = environment(ctx, c)
    if network.pod_ip:  # as interLink's plugins export it; the container's own wins
        env.setdefault("POD_IP", network.pod_ip)
    hooks = lifecycle_hooks(c)
    script = ProvisionScript(c.spec.name, ctx.pod)
    volumes = volume_configs(ctx, c, script)
    previous = _previous_init(ctx, c)
    if previous:
        script.wait_for(completion_marker(previous), previous)
    provision: tuple[str, ...] | None = None
    if not script.empty:
        name = f"setup-{c.spec.name}"
        scripts[name] = script.render()
        provision = (name,)
    kind, recovery = _policy(ctx, c)
    check, record = health_check(c, wrapped=is_wrapped(ctx.pod, c.spec))
    execution = _execution(ctx, c, env, hooks, network)
    allocation = AllocationConfig(
        executor=ctx.options.executor,
        type=kind,
        resources=dms_resources(ctx.amounts[c.spec.name]),
        execution=execution,
        dns_name=c.spec.name,
        provision=provision,
        healthcheck=check,
        volume=volumes or None,
        failure_recovery=recovery,
        depends_on=(previous,) if previous else None,
    )
    return allocation, record


# --- the ensemble ----------------------------------------------------------------------------


def _metadata(
    pod: k8s.Pod, options: TranslationOptions, probes: Mapping[str, str]
) -> dict[str, str]:
    meta = pod.metadata
    spec = pod.spec
    metadata = {
        METADATA_POD_UID: meta.uid,
        METADATA_POD_NAMESPACE: meta.namespace,
        METADATA_POD_NAME: meta.name,
        METADATA_RESTART_POLICY: spec.restart_policy,
        METADATA_GENERATION: str(options.generation),
    }
    if spec.termination_grace_period_seconds is not None:
        metadata[METADATA_GRACE_PERIOD] = str(spec.termination_grace_period_seconds)
    if spec.active_deadline_seconds is not None:
        metadata[METADATA_ACTIVE_DEADLINE] = str(spec.active_deadline_seconds)
    for name, record in probes.items():
        if record:
            metadata[METADATA_PROBES_PREFIX + name] = record
    return metadata


def _check_valid(config: EnsembleConfig, paths: Mapping[str, str]) -> None:
    """Whatever the DMS would still object to, named at the container it comes from."""
    for problem in validate_ensemble(config):
        name, _, rest = problem.path.removeprefix("allocations.").partition(".")
        if problem.path.startswith("allocations.") and name in paths:
            where = {
                "execution.params.image": "image",
                "execution.params.working_directory": "workingDir",
            }
            field = where.get(rest)
            if field:
                raise PodTranslationError(f"{paths[name]}.{field}", problem.message)
            raise PodTranslationError(paths[name], f"the DMS refuses it: {problem}")
        raise PodTranslationError("spec", f"the DMS refuses the ensemble: {problem}")


def pod_to_ensemble(
    data: RetrievedPodData, *, options: TranslationOptions | None = None
) -> EnsembleConfig:
    """The ensemble running ``data.pod``; :class:`PodTranslationError` names what cannot run."""
    options = options or TranslationOptions()
    check_pod(data.pod)
    check_unwrapped(data.pod)
    ctx = PodContext(data, options)
    peer, excluded = peer_placement(ctx.pod)
    if ctx.gpu_type is not None and not any(a.gpus for a in ctx.amounts.values()):
        raise PodTranslationError(ctx.gpu_type[1], "the pod requests no GPU of this type")
    scripts: dict[str, bytes] = {}
    allocations: dict[str, AllocationConfig] = {}
    probes: dict[str, str] = {}
    network = pod_network(ctx.pod, ctx.containers)
    for c in ctx.containers:
        allocations[c.spec.name], probes[c.spec.name] = _allocation(ctx, c, scripts, network)
    ports = _ports(ctx)
    node = NodeConfig(allocations=tuple(allocations), ports=tuple(ports) or None, peer=peer)
    config = EnsembleConfig(
        v1=EnsembleConfigV1(
            allocations=allocations,
            nodes={POD_NODE: node},
            scripts=scripts or None,
            exclude_peers=excluded or None,
            metadata=_metadata(ctx.pod, options, probes),
        )
    )
    _check_valid(config, {c.spec.name: c.path for c in ctx.containers})
    return config
