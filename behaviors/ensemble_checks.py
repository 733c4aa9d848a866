"""The DMS's checks of a transformed ensemble file (``dms/jobs/parser/ensemblev1/validate.go``).

They run on the tree, after the transforms (:mod:`.ensemble_transform`) and before anything is
decoded into structs, and they read exact keys: an allocation written with ``Executor:`` has
no ``executor`` here and is refused ("allocation must have an executor"), though the decoding
that follows would have matched the key whatever its case. The messages are the DMS's, word
for word where the DMS prints plain text (where it prints a Go value with ``%v``, the value is
described instead). As in the DMS, each check stops at its first problem; unlike the DMS,
which stops at the first failing check, every check is run and every problem reported.

The DMS's own oversights are kept, so that a file is refused here exactly when the DMS refuses
it: a ``glusterfs`` volume never passes (the check wants a Go ``[]string``, which YAML never
yields), a ``containerd`` execution is an "unsupported execution type", and checks registered
one level deep (``supervisor.children``) do not look further down.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from .ensemble_tree import Rule, RuleError, config_at
from .ensemble_validation import DNS_NAME, DOCKER_IMAGE, ENV_KEY, NAMED_VOLUME

__all__ = ["CHECKS"]

_ESCALATION = ("redeploy", "teardown")
_ALLOCATION_RECOVERY = ("stay_down", "one_for_one", "one_for_all", "rest_for_one")
_NODE_RECOVERY = ("stay_down", "restart", "redeploy")
_RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")
_SUPERVISOR_STRATEGIES = ("OneForOne", "AllForOne", "RestForOne")
_INT_RANGE = range(-(1 << 63), 1 << 63)
_GO_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.I)


def _q(text: str) -> str:
    """Go's ``%q`` of a string."""
    return json.dumps(text, ensure_ascii=False)


def _one_of(choices: tuple[str, ...]) -> str:
    """Go's ``%q`` of a string array."""
    return "[" + " ".join(_q(c) for c in choices) + "]"


def _go_list(values: list[Any]) -> str:
    """Go's ``%s`` of a ``[]any`` of strings."""
    return "[" + " ".join(str(v) for v in values) + "]"


def _is_int(value: Any) -> TypeGuard[int]:
    """Whether yaml.v3 gives a Go ``int`` (which the DMS's ``.(int)`` assertions accept)."""
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT_RANGE


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _positive_float(value: Any, name: str) -> float:
    """``convert.ToPositiveFloat64``: a number, or a string ``strconv.ParseFloat`` reads (one
    beyond the float64 range is its ``ErrRange``)."""
    text = value.strip() if isinstance(value, str) else ""
    if _GO_FLOAT.fullmatch(text) and (
        math.isfinite(float(text)) or text.lstrip("+-")[:1] in ("i", "I", "n", "N")
    ):
        result = float(text)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
    else:
        raise RuleError(f"{name} must be a valid number")
    if result <= 0:
        raise RuleError(f"{name} must be positive")
    return result


def _allocations(root: dict[str, Any]) -> Any:
    return config_at(root, "V1.allocations")


def _cyclic(allocations: Mapping[str, Any]) -> bool:
    """``CreateAdjencyList`` over ``depends_on`` and ``DetectCycles``."""
    graph: dict[str, list[str]] = {}
    for name, alloc in allocations.items():
        deps = config_at(alloc, "depends_on")
        if isinstance(deps, list):
            graph[name] = [d for d in deps if isinstance(d, str)]
        elif isinstance(deps, str):
            graph[name] = [deps]
    done: set[str] = set()

    def on_cycle(node: str, trail: set[str]) -> bool:
        if node in trail:
            return True
        if node in done:
            return False
        done.add(node)
        return any(on_cycle(n, trail | {node}) for n in graph.get(node, ()))

    return any(on_cycle(node, set()) for node in graph)


def _spec(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateSpec``: names, dependencies, and where allocations are placed."""
    if not isinstance(data, dict):
        raise RuleError("invalid spec configuration: must be a mapping")
    strategy = _str(data.get("escalation_strategy"))
    if strategy is not None and strategy not in _ESCALATION:
        raise RuleError(
            f"invalid escalation_strategy {_q(strategy)}: must be one of {_one_of(_ESCALATION)}"
        )
    allocs = data.get("allocations")
    if not isinstance(allocs, dict) or not allocs:
        raise RuleError("at least one allocation must be defined")
    lowered: dict[str, str] = {}
    dns_names: dict[str, str] = {}
    for name, alloc in allocs.items():
        if not DNS_NAME.fullmatch(name):
            raise RuleError(f"invalid allocation name, must be a valid hostname: {name}")
        other = lowered.setdefault(name.lower(), name)
        if other != name:
            raise RuleError(f"duplicate allocation names found: '{other}' and '{name}'")
        dns = _str(alloc.get("dns_name")) if isinstance(alloc, dict) else None
        if dns:
            first = dns_names.setdefault(dns, name)
            if first != name:
                raise RuleError(
                    f"duplicate dns_name found: '{dns}' used in allocations '{first}' and '{name}'"
                )
    if _cyclic(allocs):
        raise RuleError("cyclic dependencies detected in allocations")
    edges = data.get("edges")
    if isinstance(edges, list) and edges and data.get("nodes") is None:
        raise RuleError("nodes must be defined when edge_constraints are present")
    nodes = data.get("nodes")
    placed: dict[str, str] = {}
    for node_name, node in nodes.items() if isinstance(nodes, dict) else ():
        listed = node.get("allocations") if isinstance(node, dict) else None
        node_allocs: list[Any] = listed if isinstance(listed, list) else []
        for alloc_name in node_allocs:
            if not isinstance(alloc_name, str):
                continue
            first = placed.setdefault(alloc_name, node_name)
            if first != node_name:
                raise RuleError(
                    f"allocation '{alloc_name}' is assigned to multiple nodes ('{first}' and "
                    f"'{node_name}'): an allocation can only be assigned to one node"
                )
            alloc = allocs.get(alloc_name)
            deps = alloc.get("depends_on") if isinstance(alloc, dict) else None
            for dep in deps if isinstance(deps, list) else ():
                if isinstance(dep, str) and dep not in node_allocs:
                    raise RuleError(
                        f"allocation '{alloc_name}' depends on '{dep}', but '{dep}' is not in the "
                        "same node: dependent allocations must be in the same node"
                    )


def _case_hint(data: dict[str, Any], key: str) -> str:
    """Where ``data`` has ``key`` in another case (``Executor:``), that the DMS reads only the
    lowercase key, so the user sees why the key they wrote is not found."""
    found = [k for k in data if isinstance(k, str) and k != key and k.lower() == key]
    return f" (found {found[0]!r}: the DMS reads the key {key!r}, lowercase)" if found else ""


def _allocation(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateAllocation``: executor, types, names, recovery, dependencies, keys, scripts."""
    if not isinstance(data, dict):
        raise RuleError("invalid allocation configuration: must be a mapping")
    if data.get("execution") is None:
        raise RuleError("allocation must have an execution")
    if data.get("resources") is None:
        raise RuleError("allocation must have resources")
    executor = _str(data.get("executor"))
    if not executor:
        raise RuleError("allocation must have an executor" + _case_hint(data, "executor"))
    execution = data["execution"]
    if not isinstance(execution, dict):
        raise RuleError("invalid execution configuration")
    exec_type = _str(execution.get("type"))
    if not exec_type:
        raise RuleError("execution must have a type")
    if executor != exec_type:
        raise RuleError(
            f"allocation executor type ({executor}) must match execution type ({exec_type})"
        )
    if not _str(data.get("type")):
        raise RuleError("allocation must have a type (service or task)")
    dns = _str(data.get("dns_name"))
    if dns is not None:
        if not dns:
            raise RuleError("dns_name cannot be empty if specified")
        if not DNS_NAME.fullmatch(dns):
            raise RuleError(f"invalid dns_name format: {dns}")
    recovery = _str(data.get("failure_recovery"))
    if recovery is None:
        raise RuleError("failure_recovery must be specified for allocation")
    if recovery not in _ALLOCATION_RECOVERY:
        raise RuleError(
            f"invalid failure_recovery {_q(recovery)}: must be one of "
            f"{_one_of(_ALLOCATION_RECOVERY)}"
        )
    if "depends_on" in data:
        _depends_on(root, data["depends_on"], path)
    _keys(data.get("keys"))
    _provision(root, data.get("provision"))


def _depends_on(root: dict[str, Any], deps: Any, path: str) -> None:
    if not isinstance(deps, list):
        raise RuleError("depends_on must be a list of allocation names")
    allocs = _allocations(root)
    for dep in deps:
        if not isinstance(dep, str):
            raise RuleError("depends_on must be a list of allocation names")
        if dep and path.split(".")[-1] == dep:
            raise RuleError("depends_on must not refer to itself")
        if not isinstance(allocs, dict) or allocs.get(dep) is None:
            raise RuleError(f"depends_on allocation '{_go_list(deps)}' not found")


def _keys(keys: Any) -> None:
    for i, key in enumerate(keys if isinstance(keys, list) else ()):
        if not isinstance(key, dict):
            raise RuleError(f"invalid allocation key spec at index {i}: must be a map")
        key_type = _str(key.get("type"))
        if not key_type:
            raise RuleError(f"allocation key spec at index {i} must have a type")
        if key_type not in ("ssh", "gpg"):
            raise RuleError(
                f"key at index {i} has invalid type: {key_type} (must be 'ssh' or 'gpg')"
            )
        if not _str(key.get("file")):
            raise RuleError(f"allocation key at index {i} is empty")
        if not _str(key.get("dest")) and key_type != "ssh":
            raise RuleError(f"allocation key at index {i} is missing a destination")


def _provision(root: dict[str, Any], provision: Any) -> None:
    if not isinstance(provision, list) or not provision:
        return
    scripts = config_at(root, "V1.scripts")
    if scripts is None:
        raise RuleError("scripts must be defined when provision is defined")
    if not isinstance(scripts, dict):
        raise RuleError("invalid scripts configuration")
    for script in provision:
        if not isinstance(script, str):
            raise RuleError(f"invalid script reference: {script}")
        if script not in scripts:
            raise RuleError(f"referenced script '{script}' not found")


def _resources(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateResources``; like the DMS, it leaves cores and sizes as floats."""
    if not isinstance(data, dict):
        raise RuleError("invalid resources configuration: must be a mapping")
    cpu = data.get("cpu")
    if not isinstance(cpu, dict):
        raise RuleError("resources must have cpu configuration")
    if "cores" not in cpu:
        raise RuleError("cpu must have cores value")
    cpu["cores"] = _positive_float(cpu["cores"], "cpu cores")
    if cpu.get("architecture") == "":
        raise RuleError("cpu architecture cannot be empty if specified")
    if "clock_speed" in cpu:
        _positive_float(cpu["clock_speed"], "cpu clock_speed")
    ram = data.get("ram")
    if not isinstance(ram, dict):
        raise RuleError("resources must have ram configuration")
    if "size" not in ram:
        raise RuleError("ram must have size value")
    ram["size"] = _positive_float(ram["size"], "ram size")
    if "clock_speed" in ram:
        speed = _positive_float(ram["clock_speed"], "ram clock_speed")
        ram["clock_speed"] = int(speed) if math.isfinite(speed) else speed  # uint64(float)
    disk = data.get("disk")
    if not isinstance(disk, dict):
        raise RuleError("resources must have disk configuration")
    if "size" not in disk:
        raise RuleError("disk must have size value")
    disk["size"] = _positive_float(disk["size"], "disk size")
    if disk.get("type") == "":
        raise RuleError("disk type cannot be empty if specified")
    if "gpus" in data:
        _gpus(data["gpus"])


def _gpus(gpus: Any) -> None:
    if not isinstance(gpus, list):
        raise RuleError("gpus must be an array")
    for i, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise RuleError(f"gpu at index {i} is not a valid configuration")
        if "memory" in gpu:
            gpu["memory"] = _positive_float(gpu["memory"], f"gpu memory at index {i}")
        for key in ("vendor", "model"):
            if gpu.get(key) == "":
                raise RuleError(f"gpu {key} cannot be empty if specified at index {i}")


def _node(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateNode``: placed allocations, redundancy, recovery, ports, location, peer."""
    if not isinstance(data, dict):
        raise RuleError("invalid node configuration: must be a mapping")
    allocs = _allocations(root)
    placed = data.get("allocations")
    if isinstance(placed, list):
        if allocs is None:
            raise RuleError("allocations must be defined when node is defined")
        if not isinstance(allocs, dict):
            raise RuleError("invalid allocations configuration")
        for alloc in placed:
            if not isinstance(alloc, str):
                raise RuleError(f"invalid allocation reference: {alloc}")
            if alloc not in allocs:
                raise RuleError(f"referenced allocation '{alloc}' not found")
    if "redundancy" in data:
        if not _is_int(data["redundancy"]):
            raise RuleError("redundancy must be a number")
        if data["redundancy"] < 0:
            raise RuleError("redundancy must be a positive number")
    recovery = _str(data.get("failure_recovery"))
    if recovery is None:
        raise RuleError("failure_recovery must be specified for node")
    if recovery not in _NODE_RECOVERY:
        raise RuleError(
            f"invalid failure_recovery {_q(recovery)}: must be one of {_one_of(_NODE_RECOVERY)}"
        )
    ports = data.get("ports")
    for port in ports if isinstance(ports, list) else ():
        _port(allocs, port)
    location = data.get("location")
    if isinstance(location, dict):
        for kind in ("accept", "reject"):
            places = location.get(kind)
            for i, place in enumerate(places if isinstance(places, list) else ()):
                problem = _location(place)
                if problem:
                    raise RuleError(
                        f"invalid location constraints: invalid {kind} location at index {i}: "
                        f"{problem}"
                    )
    if data.get("peer") == "":
        raise RuleError("peer cannot be empty if specified")


def _port(allocs: Any, port: Any) -> None:
    if not isinstance(port, dict):
        raise RuleError("invalid port configuration: must be a mapping")
    private, public = port.get("private"), port.get("public")
    if not _is_int(private) or private <= 0:
        raise RuleError("port must have a valid private port number")
    if not _is_int(public):
        raise RuleError("public port must be specified when private port is defined")
    if (public != 0 and public < 1025) or public > 65535:
        raise RuleError(
            "port must have a valid public port number between 1025 and 65535 if specified"
        )
    alloc = _str(port.get("allocation"))
    if alloc is not None:
        if allocs is None:
            raise RuleError("allocations must be defined when referenced in port")
        if not isinstance(allocs, dict):
            raise RuleError("invalid allocations configuration")
        if alloc not in allocs:
            raise RuleError(f"referenced allocation '{alloc}' not found in port configuration")


def _location(place: Any) -> str | None:
    """``validateLocation`` (its ASN check reads a Go ``uint``, which YAML never yields)."""
    if not isinstance(place, dict):
        return "location must be a map"
    if not _str(place.get("continent")):
        return "continent is required when specifying a location"
    if place.get("country") == "":
        return "country cannot be empty if specified"
    city = _str(place.get("city"))
    if city is not None:
        if not city:
            return "city cannot be empty if specified"
        if not _str(place.get("country")):
            return "country must be specified when city is provided"
    if place.get("isp") == "":
        return "ISP cannot be empty if specified"
    return None


def _execution(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateExecution``: docker and firecracker parameters."""
    if not isinstance(data, dict):
        raise RuleError("invalid execution configuration: must be a mapping")
    exec_type = _str(data.get("type"))
    if not exec_type:
        raise RuleError("execution must have a type")
    params = data.get("params")
    if not isinstance(params, dict):
        raise RuleError("execution must have params")
    if exec_type == "docker":
        _docker(params)
    elif exec_type == "firecracker":
        _firecracker(params)
    elif exec_type != "null":
        raise RuleError(f"unsupported execution type: {exec_type}")


def _docker(params: dict[str, Any]) -> None:
    image = _str(params.get("image"))
    if not image:
        raise RuleError("docker execution must have an image")
    if not DOCKER_IMAGE.fullmatch(image):
        raise RuleError(f"invalid docker image format: {image}")
    for key, what in (("entrypoint", "entrypoint"), ("cmd", "command")):
        items = params.get(key)
        for i, item in enumerate(items if isinstance(items, list) else ()):
            if not isinstance(item, str):
                raise RuleError(f"docker {what} at index {i} must be a string")
    if "environment" in params:
        _docker_environment(params["environment"])
    if params.get("working_directory") == "":
        raise RuleError("docker working directory cannot be empty if specified")
    policy = _str(params.get("restart_policy"))
    if policy is not None:
        if not policy:
            raise RuleError("docker restart_policy cannot be empty if specified")
        if policy not in _RESTART_POLICIES:
            raise RuleError(f"invalid docker restart_policy: {policy}")


def _docker_environment(environment: Any) -> None:
    if not isinstance(environment, list):
        raise RuleError("docker environment must be a slice")
    for i, entry in enumerate(environment):
        if not isinstance(entry, str):
            raise RuleError(f"docker environment variable at index {i} must be a string")
        if not entry:
            raise RuleError(f"docker environment variable at index {i} cannot be empty")
        key, sep, _ = entry.partition("=")
        if not sep:
            raise RuleError(f"docker environment variable at index {i} must be in KEY=VALUE format")
        if not key:
            raise RuleError(f"docker environment variable key at index {i} cannot be empty")
        if not ENV_KEY.fullmatch(key):
            raise RuleError(f"invalid environment variable key format at index {i}: {key}")


def _firecracker(params: dict[str, Any]) -> None:
    for key in ("kernel_image", "root_file_system"):
        if not _str(params.get(key)):
            raise RuleError(f"firecracker execution must have a {key}")
    for key in ("kernel_args", "initrd"):
        if params.get(key) == "":
            raise RuleError(f"firecracker {key} cannot be empty if specified")


def _supervisor(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateSupervisor``."""
    if not isinstance(data, dict):
        raise RuleError("invalid supervisor configuration: must be a mapping")
    strategy = _str(data.get("strategy"))
    if strategy is not None:
        if not strategy:
            raise RuleError("supervisor strategy cannot be empty if specified")
        if strategy not in _SUPERVISOR_STRATEGIES:
            raise RuleError(f"invalid supervisor strategy: {strategy}")
    supervised = data.get("allocations")
    if isinstance(supervised, list):
        allocs = _allocations(root)
        if allocs is None:
            raise RuleError("allocations must be defined when supervisor is defined")
        if not isinstance(allocs, dict):
            raise RuleError("invalid allocations configuration")
        for alloc in supervised:
            if not isinstance(alloc, str):
                raise RuleError(f"invalid allocation reference: {alloc}")
            if alloc not in allocs:
                raise RuleError(f"referenced allocation '{alloc}' not found")
    children = data.get("children")
    for i, child in enumerate(children if isinstance(children, list) else ()):
        if not isinstance(child, dict):
            raise RuleError(f"invalid child supervisor at index {i}: must be a map")


def _edge(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateEdgeConstraints``."""
    if not isinstance(data, dict):
        raise RuleError("invalid edge constraints configuration: must be a mapping")
    source, target = _str(data.get("S")), _str(data.get("T"))
    if not source or not target:
        raise RuleError(
            "invalid edge constraints configuration: edges should be a pair of named nodes"
        )
    if source == target:
        raise RuleError("edge constraint source and target must be different nodes")
    nodes = config_at(root, "V1.nodes")
    if nodes is None:
        raise RuleError("invalid edge constraints configuration: nodes must be defined")
    if not isinstance(nodes, dict):
        raise RuleError("invalid edge constraints configuration: nodes must be a map")
    for end in (source, target):
        if end not in nodes:
            raise RuleError(f"invalid edge constraints configuration: node '{end}' not found")


def _healthcheck(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateHealthCheck``; ``interval`` is in nanoseconds by now."""
    if not isinstance(data, dict):
        raise RuleError("invalid healthcheck configuration: must be a mapping")
    if not data:
        raise RuleError("healthcheck cannot be empty if specified")
    if data.get("type", "") == "":
        raise RuleError("healthcheck must have a type")
    check = data["type"]
    if check == "http" and "endpoint" not in data:
        raise RuleError("http type healthcheck must have an endpoint")
    if check == "command" and "exec" not in data:
        raise RuleError("command type healthcheck must have exec")
    if check not in ("http", "command"):
        raise RuleError(f"unsupported healthcheck type: {check}")
    if _is_int(data.get("interval")) and data["interval"] == 0:
        raise RuleError("healthcheck interval must be greater than 0")


def _subnet(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateSubnet``."""
    if not isinstance(data, dict):
        raise RuleError("invalid subnet config")
    if not data:
        raise RuleError("subnet can not be empty if specified")
    if not isinstance(data.get("join"), bool):
        raise RuleError("subnet.join expects boolean value")


def _contract(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateContract``."""
    if not isinstance(data, dict):
        raise RuleError("invalid contract configuration: must be a mapping")
    did = _str(data.get("did"))
    if did is None:
        raise RuleError("contract 'did' must be a string")
    if not did.startswith("did:"):
        raise RuleError("invalid did format")
    host = _str(data.get("host"))
    if host is not None and not host.startswith("did:"):
        raise RuleError("invalid host did format")


def _volumes(root: dict[str, Any], data: Any, path: str) -> None:
    """``ValidateVolume``: an allocation's ``volume`` list."""
    if not isinstance(data, list):
        raise RuleError("invalid volume configuration: must be a list")
    if not data:
        raise RuleError("volume cannot be empty if specified")
    for volume in data:
        _volume(volume)


def _volume(volume: Any) -> None:
    if not isinstance(volume, dict):
        raise RuleError("invalid volume: expecting map[string]")
    kind = volume.get("type", "")
    if kind == "":
        raise RuleError("volume must have a type")
    if kind == "glusterfs":
        raise RuleError("glusterfs type volume must define one or more servers")
    if kind != "local":
        raise RuleError(f"unsupported volume type: {kind}")
    src = _str(volume.get("src"))
    if src is None:
        raise RuleError("local type volume must define source destination as 'src'")
    if "/" in src:
        if not src.startswith("/"):
            raise RuleError("local type volume source must be an absolute path")
    elif not NAMED_VOLUME.fullmatch(src):
        raise RuleError("local volume src contains invalid characters")
    if "mount_destination" not in volume:
        raise RuleError("volume must define a mount destination")


CHECKS: dict[str, Rule] = {
    "V1": _spec,
    "V1.subnet": _subnet,
    "V1.allocations.*": _allocation,
    "V1.edges.[]": _edge,
    "V1.nodes.*": _node,
    "V1.supervisor": _supervisor,
    "V1.supervisor.children.[]": _supervisor,
    "V1.allocations.*.resources": _resources,
    "V1.allocations.*.execution": _execution,
    "V1.allocations.*.healthcheck": _healthcheck,
    "V1.allocations.*.volume": _volumes,
    "V1.contracts.*": _contract,
}
"""``NewEnsembleV1Validator``'s checks by path pattern."""
