"""Capabilities (``lib/ucan/cap.go``): slash paths where a path grants everything below it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

from ...errors import DmsgwError

__all__ = ["ROOT", "Capability", "CapabilityError", "check_capability", "implies", "implies_any"]

Capability: TypeAlias = str
"""A behavior path such as ``/dms/node/peers/list``; a plain ``str`` so JSON needs no wrapping."""

ROOT: Capability = "/"
"""The capability that implies every other one."""


class CapabilityError(DmsgwError):
    """A capability that can never authorize anything."""


def implies(c: Capability, other: Capability) -> bool:
    """``c.Implies(other)``: equal, ``c`` is ``/``, or ``other`` lies under ``c``.

    The test is on whole path segments: ``/dms/node`` implies ``/dms/node/peers`` but not
    ``/dms/nodeX``.
    """
    return c in (other, ROOT) or other.startswith(c + "/")


def implies_any(granted: Iterable[Capability] | None, other: Capability) -> bool:
    """Whether some capability in ``granted`` (nil counts as none) implies ``other``."""
    return any(implies(c, other) for c in granted or ())


def check_capability(c: str) -> Capability:
    """``c``, if it is a path starting with ``/``.

    The DMS takes any string, but behaviors and topics are named by such paths and
    :func:`implies` matches whole path segments, so ``dms/node`` would match nothing: a token
    issued for it is useless, and ``nunet`` issues it without a word.
    """
    if not c.startswith("/"):
        raise CapabilityError("a capability is a path starting with '/', such as /dms/node")
    return c
