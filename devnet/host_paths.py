"""Host paths the devnet's executor makes and removes: mount points for namespaced
allocations, named volumes, and sandboxes (:func:`remove_tree`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from .sandbox import Mount


def remove_tree(path: Path) -> None:
    """``rmtree``; what is left (a read-only volume locked by permissions, which binds a
    devnet that is not root) is removed once its directories have their owner's write
    permission back (blocking). As root nothing is left, so nothing is ever changed through
    a link an allocation may have put in its sandbox."""
    shutil.rmtree(path, ignore_errors=True)
    if not path.exists():
        return
    for directory, _, _ in os.walk(path):
        with contextlib.suppress(OSError):
            mode = os.stat(directory, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                os.chmod(directory, stat.S_IMODE(mode) | stat.S_IRWXU)
    shutil.rmtree(path, ignore_errors=True)


class MountPoints:
    """Mount points made on the host for namespaced allocations, removed when none uses them.

    A bind mount needs its target to exist; inside a private mount namespace the bind is
    invisible to the host, but a directory or file created for it is not, so each one created
    here is counted by the targets at or under it (``/a`` made for ``/a/b`` serves ``/a/c`` as
    well) and removed, if still empty, when the last of them is released.
    """

    def __init__(self) -> None:
        self._users: dict[Path, int] = {}
        self._made: dict[Path, int] = {}
        """Path created here -> how many targets in use depend on it."""
        self._chain: dict[Path, list[Path]] = {}
        """Target -> the created paths it depends on, deepest first."""

    def acquire(self, mounts: Iterable[Mount]) -> None:
        for m in mounts:
            target = Path(m.target)
            self._users[target] = self._users.get(target, 0) + 1
            if self._users[target] > 1:
                continue
            missing = [p for p in (target, *target.parents) if not p.exists()]
            for path in reversed(missing):
                if path == target and m.is_file:
                    path.touch()
                else:
                    path.mkdir()
                self._made[path] = 0
            chain = [p for p in (target, *target.parents) if p in self._made]
            for path in chain:
                self._made[path] += 1
            self._chain[target] = chain

    def release(self, mounts: Iterable[Mount]) -> None:
        for m in mounts:
            target = Path(m.target)
            users = self._users.get(target, 0) - 1
            if users > 0:
                self._users[target] = users
                continue
            self._users.pop(target, None)
            for path in self._chain.pop(target, []):
                self._made[path] -= 1
                if self._made[path]:
                    continue
                del self._made[path]
                with contextlib.suppress(OSError):  # no longer empty: not ours to remove
                    if path.is_file() and path.stat().st_size == 0:
                        path.unlink()
                    elif path.is_dir():
                        path.rmdir()


class NamedVolumes:
    """A node's named ``local`` volumes: ``<root>/<name>``, made on first use and shared by
    every allocation of the node that names one, whatever its ensemble.

    An allocation holds the volumes it names from its creation (so that the containers of a
    pod share an emptyDir even after the first of them has completed) until it is released —
    shut down with its deployment, reverted, or stopped with its node; a volume no allocation
    holds any more is removed. A DMS leaves a Docker named volume in place; the devnet removes
    it so that nothing outlives the deployments using it.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._holders: dict[str, set[str]] = {}
        self.lock = asyncio.Lock()
        """Held while sandboxes are materialised and while volumes are removed."""

    def hold(self, allocation_id: str, names: Iterable[str]) -> None:
        for name in names:
            self._holders.setdefault(name, set()).add(allocation_id)

    def shared(self, allocation_id: str) -> set[str]:
        """The volumes ``allocation_id`` holds together with other allocations."""
        return {n for n, h in self._holders.items() if allocation_id in h and len(h) > 1}

    async def release(self, allocation_id: str) -> None:
        """Let go of ``allocation_id``'s volumes; remove those nobody holds any more."""
        released = [n for n, h in self._holders.items() if allocation_id in h]
        for name in released:
            self._holders[name].discard(allocation_id)
        async with self.lock:
            for name in released:
                if name in self._holders and not self._holders[name]:
                    del self._holders[name]
                    await asyncio.to_thread(remove_tree, self.root / name)
