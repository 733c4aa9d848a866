"""The codec's errors, and the path into a value that Go's decode errors name."""

from __future__ import annotations

from ..errors import DmsgwError

__all__ = ["DecodeContext", "GoDecodeError", "GoEncodeError", "NotPlainError"]


class GoEncodeError(DmsgwError):
    """A value cannot be represented in the Go type it is declared as."""


class GoDecodeError(DmsgwError):
    """JSON that Go's ``json.Unmarshal`` would refuse; the message mirrors Go's."""


class NotPlainError(Exception):
    """Raised by :meth:`GoType.fast` for a value the fast decoder does not take.

    The fast decoder handles only what it can decode exactly as the generic one does, without
    tracking where it is (a case-folded or repeated key, a type error, …); on this signal the
    caller runs the generic decoder, which is the reference and names any error as Go does.
    """


class DecodeContext:
    """Where in the value a decode error happened, for Go-shaped messages."""

    __slots__ = ("path", "root")

    def __init__(self, root: str, path: tuple[str, ...] = ()) -> None:
        self.root = root
        self.path = path

    def child(self, name: str) -> DecodeContext:
        return DecodeContext(self.root, (*self.path, name))

    def type_error(self, what: str, gotype: str) -> GoDecodeError:
        if self.path:
            where = f" into Go struct field {self.root}.{'.'.join(self.path)}"
        else:
            where = " into Go value"
        return GoDecodeError(f"json: cannot unmarshal {what}{where} of type {gotype}")
