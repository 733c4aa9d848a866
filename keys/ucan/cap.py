"""Capabilities (``lib/ucan/cap.go``): slash paths where a path grants everything below it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

__all__ = ["ROOT", "Capability", "implies", "implies_any"]

Capability: TypeAlias = str
"""A behavior path such as ``/dms/node/peers/list``; a plain ``str`` so JSON needs no wrapping."""

ROOT: Capability = "/"
"""The capability that implies every other one."""


def implies(c: Capability, other: Capability) -> bool:
    """``c.Implies(other)``: equal, ``c`` is ``/``, or ``other`` lies under ``c``.

    The test is on whole path segments: ``/dms/node`` implies ``/dms/node/peers`` but not
    ``/dms/nodeX``.
    """
    return c in (other, ROOT) or other.startswith(c + "/")


def implies_any(granted: Iterable[Capability] | None, other: Capability) -> bool:
    """Whether some capability in ``granted`` (nil counts as none) implies ``other``."""
    return any(implies(c, other) for c in granted or ())
