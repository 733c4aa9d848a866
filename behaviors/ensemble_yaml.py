"""Load an ensemble YAML file into the configuration the DMS CLI would send.

The newest DMS CLI (``cmd/actor/utils.go`` ``ProcessEnsembleYaml`` with the ``ensemblev1``
parser) reads the file with yaml.v3, resolves ``${...}`` placeholders, transforms the tree,
validates it and decodes it into ``EnsembleConfig`` with mapstructure (``json`` tags, keys
matched case-insensitively, unknown keys ignored). This module applies the same steps:

* placeholders in every string value: ``${env:NAME}`` or ``${NAME}``, ``${file:path}``
  (the file's content), either with a ``:-default``; ``|modifiers`` are ignored, as by the CLI;
* ``resources`` at the top level names reusable resource sets; an allocation's ``resources``
  may be such a name, or a mapping whose ``name`` picks a set to extend;
* RAM, disk and GPU VRAM sizes become bytes (default unit GiB; ``KiB``/``MiB``/``GiB`` are
  powers of 1024, ``KB``/``MB``/``GB`` of 1000); CPU and RAM clock speeds become Hz (default
  unit GHz); ``healthcheck.interval`` is a Go duration (``"30s"``) and becomes nanoseconds;
* ``execution: {type, image, ...}`` becomes ``{type, params: {image, ...}}``, and a mapping
  ``environment`` becomes ``["K=V", ...]``; ``scripts`` values become bytes;
* ``edge_constraints: [{edges: [a, b], rtt, bw}]`` becomes ``edges: [{s: a, t: b, ...}]``;
* defaults: ``dns_name`` = the allocation's name, ``failure_recovery`` = ``stay_down`` (for
  allocations and nodes), ``redundancy`` = 0.

Where the CLI is knowingly wrong, this loader is not, and says so here:

* ``${file:...}`` paths are relative to the YAML file's directory, so a file means the same
  wherever it is loaded from; the CLI resolves them against its working directory (pass
  ``base_dir=Path.cwd()`` for that). Absolute paths are absolute in both.
* GPU VRAM is converted under ``gpus`` (the key the DMS decodes); the CLI's conversion is
  registered under ``gpu`` and never applies, so it sends a bare ``vram: 24`` as 24 bytes.
* A resource set used by several allocations is copied for each; the CLI shares one map and
  so converts its sizes once per use (2 GiB used twice becomes 2^61 bytes).
* Clock units the CLI misreads (``ghz``, ``mhz``: go-humanize's SI prefixes are
  case-sensitive) are refused, see :func:`~dmsgw.behaviors.units.parse_clock_hz`.
* Every problem is reported, each with its YAML path, not only the first.

Keys the DMS does not know are ignored, as by the CLI, and logged as a warning. An older CLI
read ``scripts`` values and ``keys[].file`` as file paths itself; the newest sends them as
written, so use ``${file:...}`` to send a file's content.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..gojson import (
    ANY,
    BOOL,
    BYTES,
    FLOAT32,
    FLOAT64,
    INT64,
    STRING,
    UINT64,
    GoStruct,
    GoType,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
)
from .ensemble import (
    AllocationFailureRecovery,
    EnsembleConfig,
    EnsembleConfigV1,
    NodeFailureRecovery,
)
from .ensemble_validation import EnsembleError, Problem, validate_ensemble
from .goyaml import YamlSyntaxError, load_yaml
from .units import UnitError, parse_bytes, parse_clock_hz, parse_go_duration

__all__ = ["EnsembleYamlError", "load_ensemble_yaml", "parse_ensemble_yaml"]

log = logging.getLogger(__name__)

# Top-level keys the CLI reads but does not send: the file's version and resource sets.
_TOP_LEVEL_INPUTS = frozenset({"version", "resources"})
_PLACEHOLDER = re.compile(r"\$\{([^{}]+?)\}")
_MAX_EXPANSIONS = 1000
_INT_RANGES = {INT64: (-(1 << 63), (1 << 63) - 1), UINT64: (0, (1 << 64) - 1)}

Env = Mapping[str, str]


class EnsembleYamlError(EnsembleError):
    """An ensemble file that cannot be read, converted or deployed; ``source`` is the file."""


def load_ensemble_yaml(
    path: str | os.PathLike[str],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    env: Env | None = None,
) -> EnsembleConfig:
    """The ensemble in the YAML file at ``path``, ready for ``/dms/node/deployment/new``.

    ``${file:...}`` placeholders are read relative to ``base_dir`` (default: the file's
    directory); ``${env:...}`` ones from ``env`` (default: ``os.environ``).
    """
    file = Path(path)
    try:
        text = file.read_bytes().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise EnsembleYamlError([Problem("", f"no such file: {file}")]) from None
    except OSError as exc:
        raise EnsembleYamlError([Problem("", f"cannot read {file}: {exc.strerror}")]) from None
    directory = Path(base_dir) if base_dir is not None else file.parent
    return parse_ensemble_yaml(text, source=str(file), base_dir=directory, env=env)


def parse_ensemble_yaml(
    text: str,
    *,
    source: str = "<ensemble>",
    base_dir: str | os.PathLike[str] | None = None,
    env: Env | None = None,
) -> EnsembleConfig:
    """The ensemble in YAML ``text``; ``source`` names it in errors (default base: cwd)."""
    try:
        raw = load_yaml(text, source)
    except YamlSyntaxError as exc:
        raise EnsembleYamlError([Problem("", str(exc))]) from None
    if not isinstance(raw, dict):
        what = "empty" if raw is None else f"a {_kind(raw)}"
        raise EnsembleYamlError([Problem("", f"must be a YAML mapping, not {what}")], source)
    loader = _Loader(
        source,
        Path(base_dir) if base_dir is not None else Path.cwd(),
        os.environ if env is None else env,
    )
    config = loader.load(raw)
    problems = loader.problems or list(validate_ensemble(config))
    if problems:
        raise EnsembleYamlError(problems, source)
    return config


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Loader:
    """One file's conversion; problems are collected rather than raised one at a time."""

    def __init__(self, source: str, base_dir: Path, env: Env) -> None:
        self.source = source
        self.base_dir = base_dir
        self.env = env
        self.problems: list[Problem] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def load(self, raw: dict[str, Any]) -> EnsembleConfig:
        spec = self._resolve_tree(raw, "")
        v1 = self._transform(spec)
        self._check_given_values(v1)
        decoded = self._decode_struct(
            EnsembleConfigV1, {k: v for k, v in v1.items() if k not in _TOP_LEVEL_INPUTS}, ""
        )
        return EnsembleConfig(v1=decoded)

    # --- ${...} placeholders -------------------------------------------------------------

    def _resolve_tree(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {k: self._resolve_tree(v, _join(path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve_tree(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            return self._resolve_string(value, path)
        return value

    def _resolve_string(self, text: str, path: str) -> str:
        for _ in range(_MAX_EXPANSIONS):
            match = _PLACEHOLDER.search(text)
            if match is None:
                return text
            replacement = self._expand(match.group(0), match.group(1), path)
            if replacement is None:
                return text
            text = text[: match.start()] + replacement + text[match.end() :]
        self.problem(path, "placeholders keep expanding into placeholders")
        return text

    def _expand(self, expression: str, content: str, path: str) -> str | None:
        main, has_default, default = content.partition(":-")
        source_and_key = main.split("|", 1)[0]
        source, colon, key = source_and_key.partition(":")
        if not colon:
            source, key = "env", source_and_key
        if source == "env":
            value = self.env.get(key, "")
            if value:
                return value
            missing = f"environment variable {key} is not set"
        elif source == "file":
            file = self.base_dir / key
            try:
                return file.read_bytes().decode("utf-8", errors="surrogateescape")
            except FileNotFoundError:
                missing = f"file {file} does not exist"
            except OSError as exc:
                missing = f"cannot read file {file}: {exc.strerror}"
        else:
            self.problem(path, f"unknown source {source!r} in {expression} (use env or file)")
            return None
        if has_default:
            return default
        self.problem(path, f"cannot resolve {expression}: {missing}")
        return None

    # --- the CLI's transformations -------------------------------------------------------

    def _transform(self, spec: dict[str, Any]) -> dict[str, Any]:
        templates = self._resource_templates(spec.get("resources"))
        allocations = spec.get("allocations")
        if isinstance(allocations, dict):
            spec["allocations"] = {
                name: self._allocation(f"allocations.{name}", name, alloc, templates)
                for name, alloc in allocations.items()
            }
        scripts = spec.get("scripts")
        if isinstance(scripts, dict):
            spec["scripts"] = {
                name: self._script(f"scripts.{name}", script) for name, script in scripts.items()
            }
        nodes = spec.get("nodes")
        if isinstance(nodes, dict):
            for node in nodes.values():
                if isinstance(node, dict):
                    _default(node, "failure_recovery", NodeFailureRecovery.STAY_DOWN.value)
                    _default(node, "redundancy", 0)
        if "edge_constraints" in spec:
            spec["edges"] = self._edge_constraints(spec.pop("edge_constraints"))
        return spec

    def _resource_templates(self, templates: Any) -> dict[str, dict[str, Any]]:
        if templates is None:
            return {}
        if not isinstance(templates, dict):
            self.problem(
                "resources", f"must be a mapping of named resource sets, not a {_kind(templates)}"
            )
            return {}
        named: dict[str, dict[str, Any]] = {}
        for name, template in templates.items():
            if isinstance(template, dict):
                named[str(name)] = {**template, "name": name}
            elif template is None:
                named[str(name)] = {"name": name}
            else:
                self.problem(f"resources.{name}", f"must be a mapping, not a {_kind(template)}")
        return named

    def _allocation(
        self, path: str, name: str, alloc: Any, templates: Mapping[str, dict[str, Any]]
    ) -> Any:
        if not isinstance(alloc, dict):
            return alloc  # the decoder names the type problem
        alloc = dict(alloc)
        if "resources" in alloc:
            alloc["resources"] = self._resources(f"{path}.resources", alloc["resources"], templates)
        execution = alloc.get("execution")
        if isinstance(execution, dict):
            alloc["execution"] = self._execution(execution)
        healthcheck = alloc.get("healthcheck")
        if isinstance(healthcheck, dict) and "interval" in healthcheck:
            healthcheck = dict(healthcheck)
            interval = healthcheck["interval"]
            if isinstance(interval, str) and interval:
                ns = self._convert(f"{path}.healthcheck.interval", interval, parse_go_duration)
                if ns == 0:
                    self.problem(f"{path}.healthcheck.interval", "must be greater than 0")
                healthcheck["interval"] = ns
            else:
                self.problem(f"{path}.healthcheck.interval", 'must be a duration such as "30s"')
            alloc["healthcheck"] = healthcheck
        _default(alloc, "dns_name", name)
        _default(alloc, "failure_recovery", AllocationFailureRecovery.STAY_DOWN.value)
        return alloc

    def _resources(self, path: str, value: Any, templates: Mapping[str, dict[str, Any]]) -> Any:
        if isinstance(value, str):
            if value not in templates:
                known = ", ".join(sorted(templates)) or "none are defined"
                self.problem(path, f"no resource set named {value!r} (defined: {known})")
                return None
            resources = copy.deepcopy(templates[value])
        elif isinstance(value, dict):
            template = templates.get(value["name"]) if isinstance(value.get("name"), str) else None
            resources = {**copy.deepcopy(template or {}), **copy.deepcopy(value)}
        else:
            if value is not None:
                self.problem(
                    path, f"must be a mapping or the name of a resource set, not a {_kind(value)}"
                )
            return None
        resources.pop("name", None)  # it only picks the resource set
        cpu, ram, disk = (resources.get(k) for k in ("cpu", "ram", "disk"))
        if isinstance(cpu, dict):
            if isinstance(cpu.get("cores"), str):
                cpu["cores"] = self._convert(f"{path}.cpu.cores", cpu["cores"], _number_text)
            if "clock_speed" in cpu:
                cpu["clock_speed"] = self._convert(
                    f"{path}.cpu.clock_speed", cpu["clock_speed"], parse_clock_hz
                )
        if isinstance(ram, dict):
            if "size" in ram:
                ram["size"] = self._convert(f"{path}.ram.size", ram["size"], parse_bytes)
            if "clock_speed" in ram:
                hz = self._convert(f"{path}.ram.clock_speed", ram["clock_speed"], parse_clock_hz)
                ram["clock_speed"] = int(hz) if isinstance(hz, float) and math.isfinite(hz) else hz
        if isinstance(disk, dict) and "size" in disk:
            disk["size"] = self._convert(f"{path}.disk.size", disk["size"], parse_bytes)
        gpus = resources.get("gpus")
        if isinstance(gpus, list):
            for i, gpu in enumerate(gpus):
                if isinstance(gpu, dict) and "vram" in gpu:
                    gpu["vram"] = self._convert(f"{path}.gpus[{i}].vram", gpu["vram"], parse_bytes)
        return resources

    def _convert(self, path: str, value: Any, parse: Callable[[Any], Any]) -> Any:
        try:
            return parse(value)
        except UnitError as exc:
            self.problem(path, str(exc))
            return None

    def _execution(self, execution: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in execution.items() if k != "type"}
        environment = params.get("environment")
        if isinstance(environment, dict):
            params["environment"] = [
                f"{key}={_env_text(value)}" for key, value in environment.items()
            ]
        return {"type": execution.get("type"), "params": params}

    def _script(self, path: str, script: Any) -> Any:
        if isinstance(script, str):
            return script.encode("utf-8", errors="surrogateescape")
        self.problem(path, f"must be the script's text, not a {_kind(script)}")
        return None

    def _edge_constraints(self, constraints: Any) -> Any:
        if not isinstance(constraints, list):
            self.problem("edge_constraints", f"must be a list, not a {_kind(constraints)}")
            return None
        edges = []
        for i, constraint in enumerate(constraints):
            if isinstance(constraint, dict) and "edges" in constraint:
                constraint = dict(constraint)
                pair = constraint.pop("edges")
                if isinstance(pair, list) and len(pair) == 2:
                    constraint["S"], constraint["T"] = pair
                else:
                    self.problem(f"edge_constraints[{i}].edges", "must be a pair of node names")
            edges.append(constraint)
        return edges

    # --- what the DMS rejects when given but empty ---------------------------------------

    def _check_given_values(self, v1: Mapping[str, Any]) -> None:
        for name, alloc in _mapping_items(v1.get("allocations")):
            path = f"allocations.{name}"
            self._not_empty(alloc, "dns_name", path)
            resources = alloc.get("resources")
            if isinstance(resources, dict):
                self._not_empty(resources.get("cpu"), "architecture", f"{path}.resources.cpu")
                self._not_empty(resources.get("disk"), "type", f"{path}.resources.disk")
                for i, gpu in enumerate(_list(resources.get("gpus"))):
                    for key in ("vendor", "model"):
                        self._not_empty(gpu, key, f"{path}.resources.gpus[{i}]")
            execution = alloc.get("execution")
            params = execution.get("params") if isinstance(execution, dict) else None
            for key in ("working_directory", "restart_policy", "kernel_args", "initrd"):
                self._not_empty(params, key, f"{path}.execution.params")
            for key in ("healthcheck", "volume"):
                if key in alloc and alloc[key] in ({}, []):
                    self.problem(f"{path}.{key}", "must not be empty if given")
        for name, node in _mapping_items(v1.get("nodes")):
            path = f"nodes.{name}"
            self._not_empty(node, "peer", path)
            for i, port in enumerate(_list(node.get("ports"))):
                if isinstance(port, dict) and "public" not in port:
                    self.problem(
                        f"{path}.ports[{i}].public", "required when a private port is given"
                    )
            location = node.get("location")
            if isinstance(location, dict):
                for kind in ("accept", "reject"):
                    for i, place in enumerate(_list(location.get(kind))):
                        for key in ("country", "city", "isp"):
                            self._not_empty(place, key, f"{path}.location.{kind}[{i}]")
        self._check_supervisor(v1.get("supervisor"), "supervisor")
        subnet = v1.get("subnet")
        if "subnet" in v1 and (
            not isinstance(subnet, dict) or not isinstance(subnet.get("join"), bool)
        ):
            self.problem("subnet.join", "must be given as true or false when subnet is given")

    def _check_supervisor(self, supervisor: Any, path: str) -> None:
        if not isinstance(supervisor, dict):
            return
        self._not_empty(supervisor, "strategy", path)
        for i, child in enumerate(_list(supervisor.get("children"))):
            self._check_supervisor(child, f"{path}.children[{i}]")

    def _not_empty(self, mapping: Any, key: str, path: str) -> None:
        if isinstance(mapping, dict) and mapping.get(key) == "":
            self.problem(f"{path}.{key}", "must not be empty if given")

    # --- mapstructure: plain values into the Go structs ----------------------------------

    def _decode(self, gotype: GoType, value: Any, path: str) -> Any:
        if value is None:
            if isinstance(gotype, StructOf):
                return gotype.cls()
            return gotype.zero()
        if isinstance(gotype, StructOf):
            if isinstance(value, dict):
                return self._decode_struct(gotype.cls, value, path)
            return self._mismatch(gotype, value, path, "a mapping")
        if isinstance(gotype, Ptr):
            return self._decode(gotype.elem, value, path)
        if isinstance(gotype, SliceOf):
            if isinstance(value, list):
                return tuple(
                    self._decode(gotype.elem, v, f"{path}[{i}]") for i, v in enumerate(value)
                )
            return self._mismatch(gotype, value, path, "a list")
        if isinstance(gotype, MapOf):
            if isinstance(value, dict):
                return {
                    str(k): self._decode(gotype.elem, v, _join(path, str(k)))
                    for k, v in value.items()
                }
            return self._mismatch(gotype, value, path, "a mapping")
        return self._decode_scalar(gotype, value, path)

    def _decode_scalar(self, gotype: GoType, value: Any, path: str) -> Any:
        if gotype is STRING:
            return (
                value if isinstance(value, str) else self._mismatch(gotype, value, path, "a string")
            )
        if gotype is BOOL:
            return (
                value
                if isinstance(value, bool)
                else self._mismatch(gotype, value, path, "true or false")
            )
        if gotype in _INT_RANGES:
            low, high = _INT_RANGES[gotype]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
                return value
            return self._mismatch(
                gotype, value, path, "a whole number" + (" >= 0" if low == 0 else "")
            )
        if gotype is FLOAT64 or gotype is FLOAT32:
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            ):
                return float(value)
            return self._mismatch(gotype, value, path, "a number")
        if gotype is BYTES:
            return (
                value if isinstance(value, bytes) else self._mismatch(gotype, value, path, "text")
            )
        if gotype is ANY:
            return self._plain(value, path)
        raise TypeError(f"no YAML decoding for Go type {gotype.go_name}")  # a model bug

    def _decode_struct(self, cls: type[GoStruct], value: dict[Any, Any], path: str) -> Any:
        specs = cls.go_specs()
        by_fold = {spec.json.casefold(): spec for spec in specs}
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            key_path = _join(path, str(key))
            if not isinstance(key, str):
                self.problem(key_path, "keys must be strings")
                continue
            spec = next((s for s in specs if s.json == key), None) or by_fold.get(key.casefold())
            if spec is None:
                log.warning("%s: %s is not an ensemble field and is ignored", self.source, key_path)
            elif spec.attr not in kwargs or key == spec.json:
                kwargs[spec.attr] = self._decode(spec.type, item, key_path)
        return cls(**kwargs)

    def _plain(self, value: Any, path: str) -> Any:
        """A value for a Go ``interface{}`` (execution params): JSON types only."""
        if isinstance(value, dict):
            return {str(k): self._plain(v, _join(path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self._plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, float) and not math.isfinite(value):
            self.problem(path, f"{value} cannot be sent as JSON")
            return None
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        self.problem(path, f"a {type(value).__name__} cannot be sent as JSON")
        return None

    def _mismatch(self, gotype: GoType, value: Any, path: str, expected: str) -> Any:
        self.problem(path, f"must be {expected}, not {_describe(value)}")
        return gotype.zero()


def _describe(value: Any) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{_kind(value)} {value!r}"
    return f"a {_kind(value)}"


def _default(mapping: dict[str, Any], key: str, value: Any) -> None:
    """The CLI's default: set ``key`` when it is missing or null."""
    if mapping.get(key) is None:
        mapping[key] = value


def _mapping_items(value: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(value, dict):
        return []
    return [(str(k), v) for k, v in value.items() if isinstance(v, dict)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number_text(text: str) -> float:
    """``convert.ToPositiveFloat64`` on a string: cores may be given as ``"0.5"``."""
    try:
        return float(text.strip())
    except ValueError:
        raise UnitError(f"{text!r} is not a number") from None


def _env_text(value: Any) -> str:
    """A YAML scalar as text in ``KEY=VALUE`` (Go's ``%s`` would garble non-strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)
