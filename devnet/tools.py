"""The host programs the devnet runs with privileges, by absolute path, in a fixed environment.

A set-up step that runs as root (``unshare``, ``mount``, ``setpriv``, ``nsenter``, ``ip``)
must not find its programs through a ``PATH`` an allocation chose, nor load a library an
allocation named (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, …), nor read a shell start-up file it
named (``BASH_ENV``, ``ENV``), nor split words at its ``IFS``. So every such program is looked
up once in :data:`SYSTEM_PATH` alone, whatever this process's own ``PATH`` says, and runs with
:data:`SETUP_ENVIRONMENT` only; the allocation's declared environment is applied by
``env -i`` at the very last step, after privileges are dropped (:mod:`.sandbox`).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping
from types import MappingProxyType

from ..errors import DmsgwError

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
"""Where the devnet's privileged programs are looked up: the system's directories, never
``/usr/local`` or anything a user or an allocation may write."""
SETUP_ENVIRONMENT: Mapping[str, str] = MappingProxyType({"PATH": SYSTEM_PATH, "LC_ALL": "C"})
"""The whole environment of every process the devnet starts before an allocation's user and
environment take over."""
SHELL = "/bin/sh"


class MissingToolError(DmsgwError):
    """A program the devnet needs is not in :data:`SYSTEM_PATH`."""


@functools.cache
def tool(name: str) -> str:
    """The absolute path of ``name`` in :data:`SYSTEM_PATH`, else :class:`MissingToolError`."""
    found = shutil.which(name, path=SYSTEM_PATH)
    if found is None:
        raise MissingToolError(f"{name} is not installed in {SYSTEM_PATH}")
    return found


def have(*names: str) -> bool:
    """Whether every one of ``names`` is installed in :data:`SYSTEM_PATH`."""
    return all(shutil.which(name, path=SYSTEM_PATH) for name in names)
