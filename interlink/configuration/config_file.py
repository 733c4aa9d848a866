"""``dmsgw serve``'s configuration file: YAML, one ``key: value`` line per setting.

interLink's plugins are configured by a YAML file (its Helm chart mounts the ``plugin.config``
value at ``/etc/interlink/plugin.yaml``), so the gateway's is one too. The file is one flat
mapping; each key is remembered with its line, so that a bad value is reported as
``pods_capacity (file /etc/interlink/plugin.yaml:4): …``. A key given twice is refused (YAML
would keep the last one silently), and a key left empty (``dms_url:`` or ``dms_url: ""``) keeps
its default, as a templated file leaves a value it was not given.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from ...errors import DmsgwError

__all__ = ["ConfigFile", "ConfigFileError", "read_config_file"]


class ConfigFileError(DmsgwError):
    """The file cannot be read as the gateway's configuration; the message names it."""


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """The file's settings (empty values left out) and the line each key is on."""

    path: Path
    values: dict[str, object]
    lines: dict[str, int]

    def source(self, key: str) -> str:
        """Where ``key``'s value came from, as messages name it: ``file <path>:<line>``."""
        return f"file {self.path}:{self.lines[key]}"


def read_config_file(path: Path, named_by: str) -> ConfigFile:
    """The settings in ``path`` (``named_by`` says who named the file: a flag, a variable)."""
    where = f"config file {path} ({named_by})"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(f"{where}: not found") from None
    except OSError as exc:
        raise ConfigFileError(f"{where}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{where}: not UTF-8") from None
    loader = yaml.SafeLoader(text)
    try:
        return _settings(loader, path, where)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{where}: not YAML: {_yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigFileError(f"{where}: not YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _settings(loader: yaml.SafeLoader, path: Path, where: str) -> ConfigFile:
    root = loader.get_single_node()
    if root is None:  # an empty file (or comments only): every default
        return ConfigFile(path, {}, {})
    if not isinstance(root, MappingNode):
        raise ConfigFileError(f"{where}: {_not_a_mapping(root, path)}")
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise ConfigFileError(f"{where}: line {line}: the key {key!r} is not a name")
        if key in lines:
            raise ConfigFileError(
                f"{key} (file {path}:{line}): given twice (first on line {lines[key]}); keep one"
            )
        lines[key] = line
        value = loader.construct_object(value_node, deep=True)
        if value is not None and value != "":
            values[key] = value
    return ConfigFile(path, values, lines)


def _not_a_mapping(root: Node, path: Path) -> str:
    shape = "a single value" if isinstance(root, ScalarNode) else "a list"
    hint = ""
    if path.suffix == ".toml" or (isinstance(root, ScalarNode) and " = " in str(root.value)):
        hint = " (the configuration is YAML: write key: value, not key = value)"
    return f"expected one 'key: value' per line (a YAML mapping), got {shape}{hint}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's complaint on one line: what, and at which line and column."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())
