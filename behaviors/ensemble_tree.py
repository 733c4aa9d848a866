"""The DMS's walk over an ensemble file's tree (``dms/jobs/parser/tree``, ``transform``,
``validate``, ``utils``), which its transforms and validators hang on.

A path is Go's ``tree.Path``: keys joined by ``.``, list items as ``[i]``, so a key holding a
dot (an allocation named ``web.app``) is several parts, and an empty key adds none. A pattern
matches a path of as many parts, part by part: ``*`` any part, ``[]`` any list item, anything
else under ``strings.EqualFold``. Matching is case-insensitive; the functions that then read
the tree read exact keys, which is why ``Executor:`` passes the matching and fails the check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..gojson.fold import fold

__all__ = ["Rule", "RuleError", "config_at", "display_path", "next_path", "walk"]


class RuleError(Exception):
    """A transform or validator refusing the tree at a path (Go returns it as ``error``)."""


Rule = Callable[[dict[str, Any], Any, str], Any]
"""``(root, value, path) -> value``: a transform returns the new value, a validator ``None``;
either raises :class:`RuleError`."""


def next_path(path: str, key: str) -> str:
    """``tree.Path.Next``: the child path (an empty key is no step at all)."""
    if not key:
        return path
    return f"{path}.{key}" if path else key


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """``tree.Path.Matches`` for the patterns the DMS uses (no ``**``)."""
    if len(parts) != len(pattern):
        return False
    for part, want in zip(parts, pattern, strict=True):
        if want == "[]":
            if not (part.startswith("[") and part.endswith("]")):
                return False
        elif want != "*" and fold(want) != fold(part):
            return False
    return True


def walk(
    root: dict[str, Any],
    rules: Mapping[str, Rule],
    refused: Callable[[str, str], None],
    *,
    transform: bool,
) -> Any:
    """Apply every rule whose pattern matches a path, then walk the children of the result.

    A transform's result replaces the value (``TransformerImpl.transform``); a validator's is
    ignored (``ValidatorImpl.validate``). Where Go stops at the first error, each is passed to
    ``refused(path, message)`` and the walk goes on, so that every problem is reported; a
    refused transform leaves its value as it was. The walk starts at ``root`` (path ``""``).
    """

    def visit(value: Any, path: str) -> Any:
        parts = path.split(".")
        for pattern, rule in rules.items():
            if _matches(parts, pattern.split(".")):
                try:
                    result = rule(root, value, path)
                except RuleError as exc:
                    refused(path, str(exc))
                else:
                    if transform:
                        value = result
        if isinstance(value, dict):
            for key in list(value):
                value[key] = visit(value[key], next_path(path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                value[i] = visit(item, next_path(path, f"[{i}]"))
        return value

    return visit(root, "")


def config_at(config: Any, path: str) -> Any:
    """``utils.GetConfigAtPath``: each key exactly, else in lower case; ``None`` if absent."""
    current = config
    for key in path.split("."):
        if isinstance(current, dict):
            if key in current:
                current = current[key]
            elif key.lower() in current:
                current = current[key.lower()]
            else:
                return None
        elif isinstance(current, list) and key.startswith("[") and key.endswith("]"):
            index = int(key[1:-1])
            if not 0 <= index < len(current):
                return None
            current = current[index]
        else:
            return None
    return current


def display_path(path: str) -> str:
    """A tree path as problems show it: ``nodes.n1.ports[0]``."""
    return path.replace(".[", "[")
