"""Memory and CPU limits enforced by the kernel: one control group per run of an allocation.

Docker gives each container a memory cgroup whose limit the kernel enforces on every page
the container takes, so a burst dies however short it is (the OOM killer SIGKILLs the
largest process in the group: exit 137), and a CPU quota (``NanoCPUs``: ``cores`` times
the period) that throttles it. The devnet does the same where this host lets it write cgroups:

* **cgroup v2** (``memory.max``, ``memory.swap.max`` 0, ``cpu.max``) when this process's
  group may delegate those controllers to a child;
* else **cgroup v1** (``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``,
  ``cpu.cfs_quota_us``/``cpu.cfs_period_us``), one hierarchy per controller;
* else nothing: the executor samples resident memory instead (see :mod:`.executor`), which
  a burst shorter than a sample escapes, and the CPU is not limited.

The devnet makes a group of its own, named as its working directory
(``dmsgw-devnet-<pid>.<start time>-…``), under this process's group in each hierarchy (and
removes those of devnets that no longer run), and in it one group per run
(``<allocation>-<n>``). A run's main process joins its groups between ``fork`` and
``exec`` — before it can allocate anything — by writing ``0`` ("the writer") to descriptors
the devnet opened as root, so that the allocation's unprivileged user needs no permission on
the cgroup files; its descendants inherit them. Which mechanism runs is said once, in the
devnet's start log line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .confinement import stale_work_dirs

log = logging.getLogger(__name__)

CPU_PERIOD_US = 100_000
"""The CFS period Docker uses; a quota of ``cores`` times this many µs per period."""
_CONTROLLERS = ("memory", "cpu")
REMOVE_WAIT_S = 2.0
"""How long the devnet's stop waits for killed processes to leave their groups."""
REMOVE_POLL_S = 0.02


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Where one controller's groups are made: the devnet's own group in that hierarchy."""

    controller: str
    directory: Path
    v2: bool

    def describe(self) -> str:
        return f"cgroup {'v2' if self.v2 else 'v1'} {self.directory}"


def _mounts() -> Iterator[tuple[str, Path, str, set[str]]]:
    """``(root, mount point, type, super options)`` of every cgroup mount of this process."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = line.partition(" - ")
            parts, rest = fields.split(), tail.split()
            if len(parts) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                yield parts[3], Path(parts[4]), rest[0], set(rest[2].split(","))


def _own_groups() -> dict[str, str]:
    """This process's group path by controller (``""`` for the v2 hierarchy)."""
    groups: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                groups[controller] = path
    return groups


def _place(mount_root: str, mount_point: Path, group: str) -> Path | None:
    """The directory of ``group`` under a mount of ``mount_root`` (``None``: not visible)."""
    if group != mount_root and not group.startswith(mount_root.rstrip("/") + "/"):
        return None
    return mount_point / os.path.relpath(group, mount_root)


def _v2_hierarchies(name: str, groups: dict[str, str]) -> list[Hierarchy]:
    """The controllers of :data:`_CONTROLLERS` that the v2 hierarchy lets this process
    delegate to a group ``name`` of its own (none if it may not create one)."""
    for root, point, kind, _ in _mounts():
        own = _place(root, point, groups.get("", "/")) if kind == "cgroup2" else None
        if own is None:
            continue
        try:
            available = set((own / "cgroup.controllers").read_text().split())
            wanted = [c for c in _CONTROLLERS if c in available]
            if not wanted:
                return []
            # Refused (EBUSY) when this process's own group is not the root: a group with
            # processes cannot hand controllers down.
            (own / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
            base = own / name
            base.mkdir(exist_ok=True)
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        except OSError as exc:
            log.debug("cgroup v2 at %s not usable: %s", own, exc)
            return []
        return [Hierarchy(c, base, v2=True) for c in wanted]
    return []


def _v1_hierarchy(controller: str, name: str, groups: dict[str, str]) -> Hierarchy | None:
    """The v1 hierarchy of ``controller`` with a group ``name`` of this process's made in it."""
    for root, point, kind, options in _mounts():
        if kind != "cgroup" or controller not in options or controller not in groups:
            continue
        own = _place(root, point, groups[controller])
        if own is None:
            continue
        try:
            (own / name).mkdir(exist_ok=True)
        except OSError as exc:
            log.debug("cgroup v1 %s at %s not usable: %s", controller, own, exc)
            return None
        return Hierarchy(controller, own / name, v2=False)
    return None


class Cgroups:
    """The devnet's groups in every hierarchy it may write (none: no kernel limits)."""

    def __init__(self, hierarchies: Sequence[Hierarchy]) -> None:
        self.hierarchies = {h.controller: h for h in hierarchies}
        self._runs = itertools.count(1)

    @classmethod
    def probe(cls, name: str) -> Cgroups:
        """Make a group ``name`` of the devnet's own in each hierarchy it can write: v2 when
        it may delegate there, else v1 (blocking; the devnet runs it once, in a thread)."""
        groups = _own_groups()
        found = _v2_hierarchies(name, groups)
        have = {h.controller for h in found}
        for controller in _CONTROLLERS:
            if controller not in have:
                v1 = _v1_hierarchy(controller, name, groups)
                if v1 is not None:
                    found.append(v1)
        cls.remove_stale(found)
        return cls(found)

    @property
    def memory(self) -> bool:
        return "memory" in self.hierarchies

    def describe(self) -> str:
        """Which mechanism enforces limits, in the words of the devnet's start log line."""
        memory = self.hierarchies.get("memory")
        cpu = self.hierarchies.get("cpu")
        return (
            "memory limits: "
            + (f"the kernel's ({memory.describe()})" if memory else "sampled resident memory")
            + "; CPU limits: "
            + (f"the kernel's ({cpu.describe()})" if cpu else "none")
        )

    def run_group(self, allocation_id: str, memory_bytes: int, cores: float) -> RunGroup | None:
        """Groups for one run of ``allocation_id`` with its limits (``None``: no hierarchy,
        or no limit to set); raises :class:`OSError` when the kernel refuses a limit."""
        limits: list[tuple[Hierarchy, dict[str, str]]] = []
        memory, cpu = self.hierarchies.get("memory"), self.hierarchies.get("cpu")
        if memory_bytes and memory is not None:
            limits.append((memory, _memory_files(memory_bytes, memory.v2)))
        if cores > 0 and cpu is not None:
            limits.append((cpu, _cpu_files(cores, cpu.v2)))
        if not limits:
            return None
        name = f"{allocation_id.replace('/', '_')}-{next(self._runs)}"
        return RunGroup.make(name, limits)

    def remove(self) -> None:
        """Remove the devnet's groups once every allocation process has been killed
        (blocking: a killed process leaves its group a moment after the signal)."""
        for directory in {h.directory for h in self.hierarchies.values()}:
            _remove_group(directory)

    @staticmethod
    def remove_stale(hierarchies: Sequence[Hierarchy]) -> None:
        """Remove the groups that devnets which no longer run left beside ours (their
        watchdog killed their processes but cannot remove a group)."""
        for parent in {h.directory.parent for h in hierarchies}:
            for stale in stale_work_dirs(parent):
                log.info("devnet: removing cgroup %s, left by a devnet that no longer runs", stale)
                _remove_group(stale)


def _remove_group(directory: Path) -> None:
    """Remove ``directory``'s run groups, then itself, waiting up to
    :data:`REMOVE_WAIT_S` for processes killed just before to leave them."""
    deadline = time.monotonic() + REMOVE_WAIT_S
    pending = [c for c in directory.iterdir() if c.is_dir()] if directory.is_dir() else []
    pending.append(directory)
    for group in pending:
        while True:
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning("devnet: cannot remove cgroup %s: %s", group, exc)
                    break
                time.sleep(REMOVE_POLL_S)


def _memory_files(limit: int, v2: bool) -> dict[str, str]:
    """A hard memory limit, swap included (else a host with swap pages out instead of
    killing, and the limit holds only for resident memory)."""
    if v2:
        return {"memory.max": str(limit), "memory.swap.max?": "0"}
    return {"memory.limit_in_bytes": str(limit), "memory.memsw.limit_in_bytes?": str(limit)}


def _cpu_files(cores: float, v2: bool) -> dict[str, str]:
    """A CFS quota of ``cores`` CPUs per period, as Docker's ``NanoCPUs``."""
    quota = max(int(cores * CPU_PERIOD_US), 1000)
    if v2:
        return {"cpu.max": f"{quota} {CPU_PERIOD_US}"}
    return {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}


@dataclasses.dataclass
class RunGroup:
    """One run's groups (one per hierarchy) and descriptors on their ``cgroup.procs``."""

    directories: list[Path]
    memory: Path | None
    v2: bool
    fds: list[int]
    cpu: Path | None = None
    """The run's group in a cgroup v2 ``cpu`` hierarchy, whose ``cpu.stat`` counts its CPU
    time (v1's ``cpu`` controller does not count it: that is ``cpuacct``'s)."""

    @classmethod
    def make(cls, name: str, limits: Sequence[tuple[Hierarchy, dict[str, str]]]) -> RunGroup:
        """Create the groups and write their limits (a file name ending ``?`` is written only
        where the kernel has it: swap accounting may be off)."""
        group = cls([], None, False, [])
        try:
            for hierarchy, files in limits:
                directory = hierarchy.directory / name
                if directory not in group.directories:
                    directory.mkdir()
                    group.directories.append(directory)
                    group.fds.append(
                        os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
                    )
                for file, value in files.items():
                    optional = file.endswith("?")
                    path = directory / file.rstrip("?")
                    if optional and not path.exists():
                        continue
                    path.write_text(value)
                if hierarchy.controller == "memory":
                    group.memory, group.v2 = directory, hierarchy.v2
                elif hierarchy.v2:
                    group.cpu = directory
        except OSError:
            group.close()
            group.remove()
            raise
        return group

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel's OOM killer has killed so far."""
        if self.memory is None:
            return 0
        events = self.memory / ("memory.events" if self.v2 else "memory.oom_control")
        with contextlib.suppress(OSError, ValueError):
            for line in events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def close(self) -> None:
        """Close the descriptors (the started process has joined, or none will)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []

    def remove(self) -> None:
        """Remove the groups; one still holding a process stays (the devnet's stop removes it)."""
        for directory in self.directories:
            with contextlib.suppress(OSError):
                directory.rmdir()
