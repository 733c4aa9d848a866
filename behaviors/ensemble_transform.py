"""The DMS's transforms of an ensemble file (``dms/jobs/parser/ensemblev1/decode.go``).

Five passes over the tree, each a table of path patterns (:mod:`.ensemble_tree`): named sets
become lists; resource sets and volumes are resolved, scripts become bytes, an environment
mapping becomes ``KEY=VALUE`` strings; sizes, clock speeds and durations get their units;
``execution`` becomes ``{type, params}`` and ``edges: [a, b]`` becomes ``S``/``T``; last, the
defaults are set and the tree is wrapped as ``{"v1": …}``. The patterns match keys whatever
their case, but the functions read exact keys (``type``, ``name``, ``edges``, and the defaults'
``allocations`` and ``nodes``), as in the DMS.

Where the DMS is knowingly wrong, these transforms are not:

* GPU VRAM is converted under ``gpus`` (the key the DMS decodes); the DMS's conversion is
  registered under ``gpu`` and never applies, so it sends a bare ``vram: 24`` as 24 bytes.
* A resource set or volume used by several allocations is copied for each; the DMS merges into
  the shared set, so a set used twice has its sizes converted twice (``2GiB`` becomes 2^61 bytes).
* Clock units the DMS misreads (``ghz``, ``mhz``) are refused (:func:`.units.parse_clock_hz`).
* An allocation naming a resource set that does not exist is refused here, by name; the DMS
  refuses it one step later ("resources must have cpu configuration").
* An ``environment`` mapping's values are written as YAML text (``true``, ``1``); the DMS's
  ``%s`` would write ``%!s(bool=true)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .ensemble import AllocationFailureRecovery, NodeFailureRecovery
from .ensemble_tree import Rule, RuleError, config_at
from .units import UnitError, parse_bytes, parse_clock_hz, parse_go_duration

__all__ = ["STAGES", "describe"]


_QUOTED_CHARS = 40  # a longer string is cut short: one line of error, not the whole file


def describe(value: Any) -> str:
    """A YAML value in a message: its kind, and the value itself when it is short."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, str) and len(value) > _QUOTED_CHARS:
        return f"string {value[:_QUOTED_CHARS] + '…'!r} ({len(value)} characters)"
    if isinstance(value, (str, int, float)):
        kind = "string" if isinstance(value, str) else "number"
        return f"{kind} {value!r}"
    if isinstance(value, dict):
        return "a mapping"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def _mapping(problem: str, data: Any) -> None:
    if not isinstance(data, dict):
        raise RuleError(f"{problem}: must be a mapping, not {describe(data)}")


def _named_list(what: str) -> Rule:
    """``MapToNamedSliceTransformer``: ``{key: {...}}`` becomes ``[{name: key, ...}]``."""

    def rule(root: dict[str, Any], data: Any, path: str) -> Any:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise RuleError(
                f"invalid {what} configuration: must be a mapping, not {describe(data)}"
            )
        named = []
        for key, entry in data.items():
            entry = {} if entry is None else entry
            if isinstance(entry, dict):
                entry["name"] = key
            named.append(entry)
        return named

    return rule


def _inherit(root: dict[str, Any], what: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """The top-level set of ``what`` that ``config`` names, extended by ``config``; a copy,
    where the DMS merges into the shared set (and so converts its sizes once per use)."""
    sets = config_at(root, what)
    for entry in sets if isinstance(sets, list) else ():
        if isinstance(entry, dict) and "name" in config and entry.get("name") == config["name"]:
            return {**copy.deepcopy(entry), **config}
    return None


def _resources(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformResources``: a resource set by name, or a mapping that may extend one. The
    ``name`` that picks the set is dropped (the DMS's decoding drops it, as no field's)."""
    if isinstance(data, str):
        found = _inherit(root, "resources", {"name": data})
        if found is None:
            sets = config_at(root, "resources")
            names = [str(e.get("name")) for e in sets or () if isinstance(e, dict)]
            known = ", ".join(sorted(names)) or "none are defined"
            raise RuleError(f"no resource set named {data!r} (defined: {known})")
        found.pop("name")
        return found
    if isinstance(data, dict):
        resources = _inherit(root, "resources", data) or data
        resources.pop("name", None)
        return resources
    raise RuleError(
        "invalid resources configuration: must be a mapping or the name of a resource set, "
        f"not {describe(data)}"
    )


def _volume(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformVolume``: ``"name:mountpoint"`` or a mapping, extending a top-level volume."""
    if isinstance(data, str):
        parts = data.split(":")
        if len(parts) != 2:
            raise RuleError(f'invalid volume configuration: {data!r} is not "name:mountpoint"')
        data = {"name": parts[0], "mountpoint": parts[1]}
    else:
        _mapping("invalid volume configuration", data)
    return _inherit(root, "volumes", data) or data


def _script(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformStringToBytes``: a script is sent as bytes."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8", errors="surrogateescape")
    raise RuleError(f"invalid script: must be its text, not {describe(data)}")


def _env_text(value: Any) -> str:
    """A YAML scalar as the text after ``KEY=``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _environment(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformEnvironment``: a mapping becomes ``["KEY=VALUE", …]``; a list is kept."""
    if isinstance(data, dict):
        return [f"{key}={_env_text(value)}" for key, value in data.items()]
    if isinstance(data, list):
        return data
    raise RuleError(
        f"invalid environment configuration: must be a list or a mapping, not {describe(data)}"
    )


def _units(parse: Callable[[Any], Any]) -> Rule:
    """A size or clock speed with its unit (or the default one) as a number."""

    def rule(root: dict[str, Any], data: Any, path: str) -> Any:
        try:
            return parse(data)
        except UnitError as exc:
            raise RuleError(str(exc)) from None

    return rule


def _duration(root: dict[str, Any], data: Any, path: str) -> Any:
    """``ParseDuration``: a Go duration (``"30s"``) as nanoseconds."""
    if not isinstance(data, str) or not data:
        raise RuleError('must be a duration such as "30s"')
    try:
        return parse_go_duration(data)
    except UnitError as exc:
        raise RuleError(str(exc)) from None


def _spec_config(what: str) -> Rule:
    """``ToSpecConfigTransformer``: ``{type, k: v, …}`` becomes ``{type, params: {k: v, …}}``."""

    def rule(root: dict[str, Any], data: Any, path: str) -> Any:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise RuleError(
                f"invalid {what} configuration: must be a mapping, not {describe(data)}"
            )
        return {"type": data.get("type"), "params": {k: v for k, v in data.items() if k != "type"}}

    return rule


def _edge_constraint(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformEdgeConstraint``: ``edges: [a, b]`` becomes ``S: a, T: b``."""
    _mapping("invalid edge constraints", data)
    if "edges" in data:
        pair = data["edges"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise RuleError("invalid edges parameter: must be a pair of node names")
        data["S"], data["T"] = pair
        del data["edges"]
    return data


def _default(mapping: dict[str, Any], key: str, value: Any) -> None:
    """The DMS's default: set ``key`` when it is missing or null."""
    if mapping.get(key) is None:
        mapping[key] = value


def _spec(root: dict[str, Any], data: Any, path: str) -> Any:
    """``TransformSpec``: the defaults (under the exact keys), ``edges``, and ``{"v1": …}``."""
    allocations = data.get("allocations")
    for name, alloc in allocations.items() if isinstance(allocations, dict) else ():
        if isinstance(alloc, dict):
            _default(alloc, "dns_name", name)
            _default(alloc, "failure_recovery", AllocationFailureRecovery.STAY_DOWN.value)
    nodes = data.get("nodes")
    for node in nodes.values() if isinstance(nodes, dict) else ():
        if isinstance(node, dict):
            _default(node, "failure_recovery", NodeFailureRecovery.STAY_DOWN.value)
            _default(node, "redundancy", 0)
    if "edge_constraints" in data:
        data["edges"] = data.pop("edge_constraints")
    return {"v1": data}


STAGES: tuple[dict[str, Rule], ...] = (
    {
        "allocations.*.volumes": _named_list("volume"),
        "volumes": _named_list("volume"),
        "resources": _named_list("resource"),
    },
    {
        "allocations.*.volumes.[]": _volume,
        "allocations.*.resources": _resources,
        "scripts.*": _script,
        "allocations.*.execution.environment": _environment,
    },
    {
        "allocations.*.resources.cpu.clock_speed": _units(parse_clock_hz),
        "allocations.*.resources.ram.clock_speed": _units(parse_clock_hz),
        "allocations.*.resources.ram.size": _units(parse_bytes),
        "allocations.*.resources.disk.size": _units(parse_bytes),
        "allocations.*.resources.gpus.[].vram": _units(parse_bytes),
        "allocations.*.healthcheck.interval": _duration,
    },
    {
        "allocations.*.execution": _spec_config("execution"),
        "allocations.*.volumes.[].remote": _spec_config("remote volume"),
        "edge_constraints.[]": _edge_constraint,
    },
    {"": _spec},
)
"""``NewEnsemblev1Decoder``'s passes, in order (with ``gpus`` for the DMS's ``gpu``)."""
