"""A Go struct's fields: :func:`go_field` declares one, :class:`FieldSpec` is one as declared,
and :func:`struct_info` works out once per class what encoding and decoding it need."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

from .fold import fold
from .strings import encode_string
from .types import GoType

__all__ = ["Encoder", "FieldSpec", "StructInfo", "go_field", "struct_info"]

_GO_META = "go"  # the dataclass field metadata key go_field() files its declaration under


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field as declared: its JSON name, attribute, Go type and ``omitempty``."""

    json: str
    attr: str
    type: GoType
    omitempty: bool
    # '"name":' as Go writes it: the name HTML-escaped like any string (<, >, & are legal in tags).
    key: str = ""


def go_field(
    name: str,
    gotype: GoType,
    *,
    omitempty: bool = False,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """Declare a dataclass field as a Go struct field ``json:"name[,omitempty]"``."""
    meta = {_GO_META: (name, gotype, omitempty)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


class StructInfo:
    """What encoding and decoding a struct class need, worked out once per class."""

    __slots__ = ("encoders", "fast_fields", "fills", "folded", "lookup", "specs", "without")

    def __init__(self, cls: type[Any]) -> None:
        specs, defaults = [], {}
        for f in dataclasses.fields(cls):
            if _GO_META in f.metadata:
                name, gotype, omitempty = f.metadata[_GO_META]
                specs.append(FieldSpec(name, f.name, gotype, omitempty, encode_string(name) + ":"))
                defaults[f.name] = f.default
        self.specs = tuple(specs)
        self.lookup = {s.json: s for s in self.specs}
        self.folded: dict[str, FieldSpec] = {}
        for spec in self.specs:
            self.folded.setdefault(fold(spec.json), spec)  # the first folded match wins, as Go
        self.encoders = tuple(_encoder(s, operator.attrgetter(s.attr)) for s in self.specs)
        self.without: dict[str, tuple[Encoder, ...]] = {}
        self.fast_fields = {s.json: (s.attr, s.type.fast) for s in self.lookup.values()}
        # The fields a decoder must set when the input leaves them out: those whose dataclass
        # default is not already their Go zero value.
        self.fills = tuple(
            (s.attr, s.type.zero)
            for s in self.specs
            if not _is_zero_default(defaults[s.attr], s.type.zero())
        )

    def encoders_without(self, attr: str) -> tuple[Encoder, ...]:
        """The encoders, but for the field ``attr`` written at its zero value."""
        encoders = self.without.get(attr)
        if encoders is None:
            if all(s.attr != attr for s in self.specs):
                raise ValueError(f"no Go field {attr!r}")
            encoders = tuple(
                _encoder(s, _zero_getter(s.type)) if s.attr == attr else e
                for s, e in zip(self.specs, self.encoders, strict=True)
            )
            self.without[attr] = encoders
        return encoders


# How to write one field: get its value from the struct, then '{"name":' when it is the first
# field written (else ',"name":') and the value; is_empty is the omitempty test, if any.
Encoder = tuple[
    Callable[[Any], Any],
    str,
    str,
    Callable[[Any, list[str]], None],
    Callable[[Any], bool] | None,
]


def _encoder(spec: FieldSpec, get: Callable[[Any], Any]) -> Encoder:
    is_empty = spec.type.is_empty if spec.omitempty else None
    return (get, "{" + spec.key, "," + spec.key, spec.type.encode, is_empty)


def _zero_getter(gotype: GoType) -> Callable[[Any], Any]:
    return lambda _value: gotype.zero()


_SCALARS = (type(None), bool, int, float, str, bytes)


def _is_zero_default(default: Any, zero: Any) -> bool:
    """Whether ``default`` is an immutable scalar equal to ``zero`` (``-0.0`` is not ``0.0``)."""
    return type(default) is type(zero) and type(zero) in _SCALARS and repr(default) == repr(zero)


def struct_info(cls: type[Any]) -> StructInfo:
    """The class's :class:`StructInfo`, kept on the class itself (not inherited: a subclass
    may declare more fields)."""
    info: StructInfo | None = cls.__dict__.get("_go_info")
    if info is None:
        info = StructInfo(cls)
        cls._go_info = info
    return info
