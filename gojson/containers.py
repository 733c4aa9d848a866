"""Go's composite types over another type: ``[]T``, ``map[string]T`` and ``*T``.

Nil and empty are distinct, as in Go: ``None`` is the nil slice, map or pointer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .codec_errors import DecodeContext, GoEncodeError, NotPlainError
from .parse import is_array, json_kind
from .strings import encode_value_string
from .types import GoType

__all__ = ["MapOf", "Ptr", "SliceOf", "encode_map"]


class SliceOf(GoType):
    """``[]T``; ``None`` is the nil slice (``null``), ``[]`` the empty one."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "[]" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
            return
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            self.elem.encode(item, out)
        out.append("]")

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if not is_array(raw):
            raise ctx.type_error(json_kind(raw), self.go_name)
        # Go decodes element i into the slice's existing element i when there is one (its
        # length is reset, not its contents), so a repeated key merges into earlier elements.
        old = tuple(current) if current is not None else ()
        return tuple(
            self.elem.decode(item, old[i] if i < len(old) else self.elem.zero(), ctx)
            for i, item in enumerate(raw)
        )

    def fast(self, raw: Any) -> Any:
        if is_array(raw):
            elem = self.elem.fast
            return tuple([elem(item) for item in raw])
        if raw is None:
            return None
        raise NotPlainError


def encode_map(value: Any, encode_item: Callable[[Any, list[str]], None], out: list[str]) -> None:
    """A Go map (or a dict held in an ``interface{}``): keys sorted, as Go writes them."""
    out.append("{")
    for i, key in enumerate(sorted(value)):
        if not isinstance(key, str):
            raise GoEncodeError(f"map keys must be strings, got {key!r}")
        if i:
            out.append(",")
        out.append(encode_value_string(key))
        out.append(":")
        encode_item(value[key], out)
    out.append("}")


class MapOf(GoType):
    """``map[string]T``: keys are written sorted, as Go does."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "map[string]" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
        else:
            encode_map(value, self.elem.encode, out)

    def is_empty(self, value: Any) -> bool:
        return not value

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        if not isinstance(raw, tuple):
            raise ctx.type_error(json_kind(raw), self.go_name)
        # Go keeps an existing map and its entries; each value is decoded into a fresh zero
        # element (so a repeated key replaces, it does not merge).
        result: dict[str, Any] = dict(current) if current is not None else {}
        for key, item in raw:
            result[key] = self.elem.decode(item, self.elem.zero(), ctx.child(key))
        return result

    def fast(self, raw: Any) -> Any:
        if isinstance(raw, tuple):
            # A repeated key replaces the earlier value, as a dict display does.
            elem = self.elem.fast
            return {key: elem(item) for key, item in raw}
        if raw is None:
            return None
        raise NotPlainError


class Ptr(GoType):
    """``*T``: ``None`` is nil (``null``; omitted under ``omitempty``)."""

    def __init__(self, elem: GoType) -> None:
        self.elem = elem
        self.go_name = "*" + elem.go_name

    def encode(self, value: Any, out: list[str]) -> None:
        if value is None:
            out.append("null")
        else:
            self.elem.encode(value, out)

    def is_empty(self, value: Any) -> bool:
        return value is None

    def decode(self, raw: Any, current: Any, ctx: DecodeContext) -> Any:
        if raw is None:
            return None
        return self.elem.decode(raw, current if current is not None else self.elem.zero(), ctx)

    def fast(self, raw: Any) -> Any:
        return None if raw is None else self.elem.fast(raw)
