"""Load an ensemble YAML file exactly as the DMS does, into what ``/dms/node/deployment/new``
takes.

The newest DMS CLI (``cmd/actor/utils.go`` ``ProcessEnsembleYaml``, the ``ensemblev1`` parser of
``dms/jobs/parser``) takes a file through these steps, each only if the one before passed:

1. yaml.v3 reads it into a map (:mod:`.goyaml`);
2. ``${...}`` placeholders in string values are resolved: ``${env:NAME}`` or ``${NAME}``,
   ``${file:path}`` (the file's content), either with a ``:-default``; ``|modifiers`` are
   ignored, as by the DMS;
3. the map is transformed (:mod:`.ensemble_transform`): resource sets and volumes resolved,
   units applied (sizes to bytes, default GiB; clock speeds to Hz, default GHz; the health
   check's ``interval`` from a Go duration to nanoseconds), ``execution: {type, image, ...}``
   to ``{type, params: {image, ...}}``, ``edge_constraints`` to ``edges``, defaults set
   (``dns_name`` = the allocation's name, ``failure_recovery`` = ``stay_down``, ``redundancy``
   = 0), and the whole wrapped as ``{"v1": ...}``;
4. the map is checked (:mod:`.ensemble_checks`), reading exact lowercase keys: ``Executor:`` or
   ``Nodes:`` is refused here with the DMS's reason, though step 5 would match it;
5. the map is decoded into ``EnsembleConfig`` as mapstructure does on the ``json`` tags: a key
   matches its field exactly, else under ``strings.EqualFold``; unknown keys are dropped (and
   logged here as a warning).

The gateway then runs its own checks (:func:`~.ensemble_validation.validate_ensemble`), which
add what the DMS only finds out while deploying. Where the DMS is knowingly wrong, this loader
is not, and says so: in :mod:`.ensemble_transform`, and here:

* ``${file:...}`` paths are relative to the YAML file's directory, so a file means the same
  wherever it is loaded from; the DMS resolves them against its working directory (pass
  ``base_dir=Path.cwd()`` for that). Absolute paths are absolute in both.
* A number with a fraction where Go wants a whole one (``redundancy: 1.5`` is caught by the
  checks, ``rtt: 1.5`` is not) is refused; mapstructure would cut the fraction off.
* A key that is not a string is refused; yaml.v3 would use its text.
* Every problem of the failing step is reported, each with its YAML path, not only the first.

An older DMS read ``scripts`` values and ``keys[].file`` as file paths itself; the newest sends
them as written, so use ``${file:...}`` to send a file's content.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping
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
from ..gojson.fold import fold
from .ensemble import EnsembleConfig, EnsembleConfigV1
from .ensemble_checks import CHECKS
from .ensemble_transform import STAGES, describe
from .ensemble_tree import display_path, walk
from .ensemble_validation import EnsembleError, Problem, validate_ensemble
from .goyaml import YamlSyntaxError, load_yaml

__all__ = ["EnsembleYamlError", "load_ensemble_yaml", "parse_ensemble_yaml"]

log = logging.getLogger(__name__)

# Top-level keys the DMS reads but does not send: the file's version, resource sets, volumes.
_TOP_LEVEL_INPUTS = frozenset({"version", "resources", "volumes"})
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
        what = "empty" if raw is None else describe(raw)
        raise EnsembleYamlError([Problem("", f"must be a YAML mapping, not {what}")], source)
    loader = _Loader(
        source,
        Path(base_dir) if base_dir is not None else Path.cwd(),
        os.environ if env is None else env,
    )
    config = loader.load(raw)
    problems = list(validate_ensemble(config))
    if problems:
        raise EnsembleYamlError(problems, source)
    return config


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Loader:
    """One file's way through the DMS's steps. Each step reports every problem it finds, and
    the next one runs only when there were none, as the DMS stops at a failing step."""

    def __init__(self, source: str, base_dir: Path, env: Env) -> None:
        self.source = source
        self.base_dir = base_dir
        self.env = env
        self.problems: list[Problem] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def refused(self, path: str, message: str) -> None:
        """A transform's refusal at a path of the file's tree."""
        self.problem(display_path(path), message)

    def refused_in_v1(self, path: str, message: str) -> None:
        """A check's refusal at a path of the wrapped tree (shown without its ``v1.``)."""
        self.refused(path.removeprefix("v1").removeprefix("."), message)

    def passed(self) -> None:
        """Stop here if this step found problems."""
        if self.problems:
            raise EnsembleYamlError(self.problems, self.source)

    def load(self, raw: dict[str, Any]) -> EnsembleConfig:
        spec = self._resolve_tree(raw, "")
        self.passed()
        for stage in STAGES:  # a refused transform leaves its value for the later passes
            spec = walk(spec, stage, self.refused, transform=True)
        self.passed()
        walk(spec, CHECKS, self.refused_in_v1, transform=False)
        self.passed()
        sent = {k: v for k, v in spec["v1"].items() if k not in _TOP_LEVEL_INPUTS}
        config = EnsembleConfig(v1=self._decode_struct(EnsembleConfigV1, sent, ""))
        self.passed()
        return config

    # --- ${...} placeholders -------------------------------------------------------------

    def _resolve_tree(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    self.problem(_join(path, str(key)), "keys must be strings")
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

    def _decode_struct(self, cls: type[GoStruct], value: dict[str, Any], path: str) -> Any:
        """A key matches its field exactly, else under ``strings.EqualFold`` (an exact match
        wins, then the first folded one; mapstructure picks among those in map order)."""
        specs = cls.go_specs()
        by_fold = {fold(spec.json): spec for spec in specs}
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            key_path = _join(path, key)
            spec = next((s for s in specs if s.json == key), None) or by_fold.get(fold(key))
            if spec is None:
                log.warning("%s: %s is not an ensemble field and is ignored", self.source, key_path)
            elif key != spec.json and (spec.json in value or spec.attr in kwargs):
                log.warning("%s: %s is ignored: the DMS uses %s", self.source, key_path, spec.json)
            else:
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
        self.problem(path, f"must be {expected}, not {describe(value)}")
        return gotype.zero()
