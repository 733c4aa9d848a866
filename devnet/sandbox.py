"""The sandbox of one allocation: its directory, its files, and the command that runs in it.

The devnet does not pull or run container images: an allocation's ``entrypoint`` + ``cmd`` run
as a host process (see :mod:`.executor`). What a container would see at its own paths is laid
out in a per-allocation directory: provision scripts under ``scripts/``, keys and
volume contents under ``rootfs/`` (or a volume's local ``src`` on the host), the working
directory under ``rootfs/`` too, and ``stdout.log``/``stderr.log`` beside them.

Two ways to put volumes and keys at their declared paths:

* ``namespace`` (root with ``unshare``): the process gets a private mount namespace and each
  volume/key is bind-mounted at its declared path; the command is run unchanged. A mount point
  that does not exist on the host is created for the allocation's lifetime and removed after.
* ``rewrite`` (everyone else): declared paths are rewritten into the sandbox wherever they
  appear as a path in the command's arguments, environment values and working directory.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from dmsgw.devnet.protocol import AllocationDeploymentConfig
from dmsgw.errors import DmsgwError

WRAPPER_NAME = "dmsgw-allocation"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxError(DmsgwError):
    """An allocation that cannot run as configured (the message says what to change)."""


class Isolation(enum.StrEnum):
    NAMESPACE = "namespace"
    REWRITE = "rewrite"


@dataclasses.dataclass(frozen=True)
class Mount:
    """``source`` (a host path) seen at ``target`` (the path the allocation declared)."""

    source: Path
    target: str
    read_only: bool = False
    is_file: bool = False


@dataclasses.dataclass(frozen=True)
class SandboxPlan:
    """Everything needed to materialise the sandbox and start the process."""

    root: Path
    command: tuple[str, ...]
    environment: Mapping[str, str]
    workdir: str
    mounts: tuple[Mount, ...]
    files: Mapping[Path, bytes]
    scripts: tuple[Path, ...]
    isolation: Isolation
    paths: Mapping[str, str]
    """Declared path -> sandbox path, applied to commands in ``rewrite`` mode."""

    @property
    def stdout(self) -> Path:
        return self.root / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.root / "stderr.log"

    def argv(self) -> list[str]:
        """The process to start: a shell that mounts (in its own mount namespace), runs the
        provision scripts, changes directory and execs the command."""
        steps = ["set -e"]
        if self.isolation is Isolation.NAMESPACE:
            for m in self.mounts:
                steps.append(f"mount --bind {shlex.quote(str(m.source))} {shlex.quote(m.target)}")
                if m.read_only:
                    steps.append(f"mount -o remount,bind,ro {shlex.quote(m.target)}")
        steps += [f"sh {shlex.quote(str(script))}" for script in self.scripts]
        steps.append(f'cd {shlex.quote(self.workdir)} && exec "$@"')
        shell = ["/bin/sh", "-c", "\n".join(steps), WRAPPER_NAME, *self.command]
        if self.isolation is Isolation.NAMESPACE:
            return ["unshare", "--mount", "--propagation", "private", "--", *shell]
        return shell

    def host_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` (e.g. a health check) as it must be written to run beside the process."""
        if self.isolation is Isolation.REWRITE:
            rewrite = PathRewriter(self.paths)
            return [rewrite(arg) for arg in argv]
        return list(argv)


def _container_path(path: str, what: str) -> str:
    if not path.startswith("/"):
        raise SandboxError(f"{what} {path!r} must be an absolute path")
    return str(PurePosixPath(path))


def _inside(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SandboxError(f"{what} must be a list of strings, got {value!r}")


def _environment(value: Any) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in _strings(value, "execution.environment"):
        name, sep, text = entry.partition("=")
        if not sep or not name:
            raise SandboxError(f"execution.environment entry {entry!r} is not NAME=VALUE")
        env[name] = text
    return env


class PathRewriter:
    """Replaces declared container paths by their sandbox paths where they occur as paths
    (``/data`` in ``cat /data/x`` or ``--dir=/data``, not in ``/database``)."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)
        if self.table:
            targets = sorted(self.table, key=len, reverse=True)
            alternatives = "|".join(re.escape(t.rstrip("/") or "/") for t in targets)
            self._pattern: re.Pattern[str] | None = re.compile(
                rf"(?<![\w./-])({alternatives})(?=/|[^\w.-]|$)"
            )
        else:
            self._pattern = None

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self.table[m.group(1)], text)


def plan_sandbox(
    root: Path, config: AllocationDeploymentConfig, isolation: Isolation
) -> SandboxPlan:
    """Lay out the sandbox for ``config`` under ``root`` (nothing is written yet)."""
    params: Mapping[str, Any] = config.execution.params or {}
    image = params.get("image", "")
    command = _strings(params.get("entrypoint"), "execution.entrypoint") + _strings(
        params.get("cmd"), "execution.cmd"
    )
    if not command:
        raise SandboxError(
            f"the devnet runs an allocation's entrypoint + cmd as a process and does not pull "
            f"images: give execution.cmd (or entrypoint) for image {image!r}"
        )
    rootfs = root / "rootfs"
    mounts: list[Mount] = []
    files: dict[Path, bytes] = {}
    for i, volume in enumerate(config.volume or ()):
        target = _container_path(volume.mount_destination, f"volume[{i}].mount_destination")
        if volume.type == "local" and volume.src:
            source = Path(volume.src).expanduser()
            if not source.is_absolute():
                raise SandboxError(f"volume[{i}].src {volume.src!r} must be an absolute path")
        else:
            source = root / "volumes" / (volume.name or str(i))
        mounts.append(Mount(source, target, volume.read_only))
    for i, key in enumerate(config.keys or ()):
        source = root / "keys" / str(i) / (PurePosixPath(key.dest).name or key.type or "key")
        files[source] = key.file.encode()
        if key.dest:
            target = _container_path(key.dest, f"keys[{i}].dest")
            mounts.append(Mount(source, target, read_only=True, is_file=True))
    scripts: list[Path] = []
    for name, body in sorted((config.provision_scripts or {}).items()):
        path = root / "scripts" / PurePosixPath(name).name
        files[path] = body
        scripts.append(path)
    workdir_value = params.get("working_directory") or ""
    if not isinstance(workdir_value, str):
        raise SandboxError(f"execution.working_directory must be a string, got {workdir_value!r}")
    workdir = _container_path(workdir_value, "execution.working_directory") if workdir_value else ""
    table = {m.target: str(m.source) for m in mounts}
    if workdir and not any(_inside(workdir, m.target) for m in mounts):
        table[workdir] = str(rootfs / workdir.lstrip("/"))
    environment = {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "HOME": str(root / "work"),
        **_environment(params.get("environment")),
    }
    if isolation is Isolation.REWRITE:
        rewrite = PathRewriter(table)
        command = tuple(rewrite(arg) for arg in command)
        environment = {name: rewrite(value) for name, value in environment.items()}
        cwd = rewrite(workdir) if workdir else str(root / "work")
    else:
        cwd = workdir if any(_inside(workdir, m.target) for m in mounts) else ""
        cwd = cwd or (table[workdir] if workdir else str(root / "work"))
    return SandboxPlan(
        root=root,
        command=command,
        environment=environment,
        workdir=cwd,
        mounts=tuple(mounts),
        files=files,
        scripts=tuple(scripts),
        isolation=isolation,
        paths=table,
    )


def materialise(plan: SandboxPlan) -> None:
    """Create the sandbox's directories and files (blocking: run it in a thread)."""
    for sub in ("work", "rootfs"):
        (plan.root / sub).mkdir(parents=True, exist_ok=True)
    for path, data in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o600 if "keys" in path.parts else 0o700)
    for m in plan.mounts:
        if m.is_file:
            continue
        if m.source.is_relative_to(plan.root):
            m.source.mkdir(parents=True, exist_ok=True)
        elif not m.source.is_dir():
            raise SandboxError(f"volume source {m.source} is not a directory on this host")
    if Path(plan.workdir).is_relative_to(plan.root):
        Path(plan.workdir).mkdir(parents=True, exist_ok=True)
