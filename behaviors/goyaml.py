"""Read YAML into plain values the way Go's ``gopkg.in/yaml.v3`` does into ``interface{}``.

PyYAML implements YAML 1.1, under which ``yes``/``on`` are booleans, ``1:30`` is a number and
``2024-01-01`` a date; the DMS CLI (yaml.v3) reads all three as strings. Plain scalars are
therefore resolved here with yaml.v3's rules: ``true``/``false`` (three spellings each) are
booleans, ``~``/``null``/empty are null, integers follow ``strconv.ParseInt(s, 0, 64)`` after
dropping ``_`` (so ``0x1F``, ``0o17``, ``0b101`` and C-style ``017`` work), then
``ParseUint``, then YAML-style floats (``.inf``, ``.nan`` included); anything else is a string.
A key given twice in one mapping is an error, as in yaml.v3.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from ..errors import DmsgwError

__all__ = ["YamlSyntaxError", "load_yaml"]

_PLAIN_TAG = "tag:dmsgw,2025:go-plain"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_SPECIAL_FLOATS = {
    **{s: math.inf for s in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{s: -math.inf for s in ("-.inf", "-.Inf", "-.INF")},
    **{s: math.nan for s in (".nan", ".NaN", ".NAN")},
}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INT_BODY = {
    16: re.compile(r"[0-9a-fA-F]+"),
    8: re.compile(r"[0-7]+"),
    2: re.compile(r"[01]+"),
    10: re.compile(r"[0-9]+"),
}
_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1
MAX_DEPTH = 100
"""How deeply collections may nest: an ensemble is a few levels deep, and the steps after
reading (placeholders, transform, checks, decoding) walk it by recursion."""


class YamlSyntaxError(DmsgwError):
    """Text that is not YAML (or not YAML the DMS CLI would read); names line and column."""


def _go_integer(text: str) -> int | None:
    """``strconv.ParseInt(text, 0, 64)``, falling back to ``ParseUint``; ``None`` if neither."""
    sign, body = "", text
    if body[:1] in ("+", "-"):
        sign, body = body[0], body[1:]
    base = 10
    if len(body) > 2 and body[0] == "0" and body[1] in "xXoObB":
        base = {"x": 16, "o": 8, "b": 2}[body[1].lower()]
        body = body[2:]
    elif len(body) > 1 and body[0] == "0":
        base = 8
    if not _INT_BODY[base].fullmatch(body):
        return None
    value = int(body, base) * (-1 if sign == "-" else 1)
    return value if _INT64_MIN <= value <= _UINT64_MAX else None


def go_plain_scalar(text: str) -> Any:
    """The value yaml.v3 gives an unquoted scalar decoded into ``interface{}``."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if text in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[text]
    if text[:1] not in tuple("+-.0123456789"):
        return text
    plain = text.replace("_", "")
    integer = _go_integer(plain)
    if integer is not None:
        return integer
    if _YAML_FLOAT.fullmatch(plain):
        number = float(plain)
        if math.isfinite(number):
            return number
    return text


class _GoLoader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._composing: list[str] = []  # the anchors whose nodes are being composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        """yaml.v3 refuses an alias inside its own anchor's value; PyYAML builds the cycle,
        which no plain value can hold (walking it never ends)."""
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) and event.anchor in self._composing:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"anchor {event.anchor!r} value contains itself",
                event.start_mark,  # type: ignore[arg-type]
            )
        anchor = None if isinstance(event, yaml.AliasEvent) else getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._composing.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._composing.pop()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = seen.setdefault(key, key_node)
            except TypeError:
                continue  # unhashable: the base class reports it
            if earlier is not key_node:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"mapping key {key!r} already defined at line {earlier.start_mark.line + 1}",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


def _construct_plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    return go_plain_scalar(loader.construct_scalar(node))  # type: ignore[arg-type]


# Every plain scalar but the merge key "<<" gets our tag, whose constructor applies Go's rules.
_GoLoader.yaml_implicit_resolvers = {
    "<": [(_MERGE_TAG, re.compile(r"<<\Z"))],
    None: [(_PLAIN_TAG, re.compile(""))],
}
_GoLoader.add_constructor(_PLAIN_TAG, _construct_plain)


def _allowed_alias_ratio(decodes: int) -> float:
    """yaml.v3's ``allowedAliasRatio``: the share of decoded nodes that may come from aliases,
    0.99 up to 400,000 nodes, falling to 0.10 at 4,000,000."""
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000


def _check_aliasing(root: yaml.Node, source: str) -> None:
    """Refuses a document whose aliases expand it as yaml.v3 refuses it ("billion laughs"):
    PyYAML shares an aliased node, but the plain values copy it once per alias, so a few
    hundred bytes could take minutes and gigabytes. yaml.v3 counts every node it decodes and
    those under an alias, and gives up past :func:`_allowed_alias_ratio`; so does this walk, in
    document order, where a node met again is an alias."""
    decodes = aliased = 0
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 0)]
    while stack:
        node, in_alias, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(source)
        in_alias = in_alias or id(node) in seen
        seen.add(id(node))
        decodes += 1
        aliased += in_alias
        if aliased > 100 and decodes > 1000 and aliased / decodes > _allowed_alias_ratio(decodes):
            raise YamlSyntaxError(f"{source}: YAML error: document contains excessive aliasing")
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            continue
        stack.extend((child, in_alias, depth + 1) for child in reversed(children))


def _too_deep(source: str) -> YamlSyntaxError:
    return YamlSyntaxError(f"{source}: YAML error: nested more than {MAX_DEPTH} levels deep")


def load_yaml(text: str, source: str) -> Any:
    """The first YAML document of ``text`` as plain values; :class:`YamlSyntaxError` else."""
    loader = _GoLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except RecursionError:  # PyYAML composes nested collections by recursion
            raise _too_deep(source) from None
        if root is None:
            return None
        _check_aliasing(root, source)
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlSyntaxError(f"{source}: YAML error{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"{source}: YAML error: {exc}") from None
    finally:
        loader.dispose()
