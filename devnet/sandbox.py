"""The sandbox of one allocation: its directory, its files, and the command that runs in it.

An allocation whose image is not in Podman's storage (see :mod:`.images`; the devnet pulls
nothing) runs its ``entrypoint`` + ``cmd`` as a host process (see :mod:`.executor`). What a
container would see at its own paths is laid out in a per-allocation directory: provision
scripts under ``scripts/``, keys under ``keys/``,
other volume types under ``volumes/``, the working directory under ``rootfs/``, and
``stdout.log``/``stderr.log`` beside them. A ``local`` volume's ``src`` is a host directory when
it is an absolute path, else the name of a volume the node keeps for every allocation naming it
(:class:`~dmsgw.devnet.host_paths.NamedVolumes`), as Docker treats a mount source that is a name.

The process is a shell that sets the allocation up and then execs the command:

1. mounts (``namespace`` isolation only, see below);
2. the provision scripts, in name order, with every volume writable (a script that fails ends
   the set-up: the allocation does not start, and its stderr is the reason);
3. ``read_only`` volumes made read-only;
4. a ``started`` line on the sandbox's status FIFO, then ``exec`` of the command.

When the devnet is root, the allocation's user (:class:`~dmsgw.devnet.confinement.RunAs`) is
unprivileged: in ``rewrite`` mode the whole shell runs as that user; in ``namespace`` mode the
shell mounts as root and runs the provision scripts and the command through ``setpriv`` as
that user. What the allocation writes (``work``, ``rootfs``, its volumes, scripts and keys)
is that user's; the sandbox directory itself, its logs and ``stage/`` stay the devnet's.

Two ways to put volumes and keys at their declared paths:

* ``namespace`` (root with ``unshare``): the process gets private mount and PID namespaces
  (a ``/proc`` of its own; the set-up shell stays as the namespace's init, passing signals on
  to the command: :func:`~.userns.init_steps`) and each volume/key is bind-mounted at its
  declared path; commands and scripts run unchanged, and a
  ``read_only`` volume is bind-remounted read-only after the scripts. Sources are first bound
  into the sandbox's ``stage/`` and reached through a descriptor, so a volume mounted over
  ``/tmp`` cannot hide the sandbox from the rest of the set-up.
* ``rewrite`` (everyone else): declared paths are rewritten into the sandbox wherever they
  appear as a path in the command's arguments, environment values, working directory and the
  text of the provision scripts (so a script writing ``/etc/app/x`` writes into the volume, not
  the host's ``/etc``). A ``read_only`` volume that only this allocation uses and the devnet
  made loses its write permission bits after the scripts (which only binds non-root
  processes); a host directory or a volume shared with other allocations is left writable.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import shlex
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from ..behaviors.ensemble import VolumeConfig
from ..errors import DmsgwError
from .confinement import RunAs
from .protocol import AllocationDeploymentConfig
from .tools import SHELL, tool
from .userns import init_steps

WRAPPER_NAME = "dmsgw-allocation"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SIGNALS = "--default-signal=INT,QUIT"
"""``env``'s option giving the command the default handling of the signals a shell ignores
in what it starts in the background (the init of a PID namespace starts it so)."""
STATUS_FIFO = "status.fifo"
"""The FIFO in the sandbox on which the set-up reports ``started`` or ``failed <i> <code>``."""
SANDBOX_FD = 8
"""The set-up shell's descriptor on the sandbox (``namespace`` mode): ``/proc/self/fd/8/…``
still reaches it when a volume is mounted over one of its parent directories."""
_VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
"""The DMS's rule for a named volume (a ``src`` without ``/``), as ``validate.go`` has it."""


class SandboxError(DmsgwError):
    """An allocation that cannot run as configured (the message says what to change)."""


class Isolation(enum.StrEnum):
    NAMESPACE = "namespace"
    REWRITE = "rewrite"


@dataclasses.dataclass(frozen=True)
class Mount:
    """``source`` (a host path) seen at ``target`` (the path the allocation declared).

    ``owned``: the devnet made ``source`` (a named or sandbox volume, a key file), so it may
    change its permissions; ``shared``: a named volume other allocations of the node use too.
    """

    source: Path
    target: str
    read_only: bool = False
    is_file: bool = False
    owned: bool = False
    shared: bool = False

    @property
    def depth(self) -> int:
        return len(PurePosixPath(self.target).parts)


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
    script_names: tuple[str, ...]
    isolation: Isolation
    paths: Mapping[str, str]
    """Declared path -> sandbox path, applied to commands and scripts in ``rewrite`` mode."""
    memory_limit: int
    """``resources.ram.size`` in bytes (0: none)."""
    cpu_limit: float = 0.0
    """``resources.cpu.cores`` (0: none)."""
    run_as: RunAs | None = None
    """The unprivileged user the allocation runs as (``None``: the devnet's own)."""
    image: str = ""
    """The image it runs in a container (:mod:`.images`; ``""``: a host process)."""
    entrypoint: tuple[str, ...] = ()
    """The part of ``command`` that is the allocation's ``entrypoint`` (images only)."""

    @property
    def stdout(self) -> Path:
        return self.root / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.root / "stderr.log"

    @property
    def status_fifo(self) -> Path:
        return self.root / STATUS_FIFO

    def stage(self, index: int) -> Path:
        """Where mount ``index``'s source is bound first (``namespace`` mode)."""
        return self.root / "stage" / str(index)

    @property
    def outermost(self) -> tuple[Mount, ...]:
        """Mounts whose target lies inside no other mount's target: their mount points are on
        the host; the others' are made inside the volume that contains them."""
        return tuple(m for m in self.mounts if not self._nested(m))

    def _nested(self, mount: Mount) -> bool:
        return any(
            other.target != mount.target and _inside(mount.target, other.target)
            for other in self.mounts
        )

    def locked(self) -> tuple[Mount, ...]:
        """``rewrite`` mode: the read-only mounts made read-only by permissions."""
        return tuple(m for m in self.mounts if m.read_only and m.owned and not m.shared)

    def argv(self) -> list[str]:
        """The process to start: a shell that sets the allocation up and execs the command.

        The shell starts with :data:`~.tools.SETUP_ENVIRONMENT` and finds every program by its
        absolute path; the allocation's environment comes after it as ``NAME=VALUE``
        arguments, ahead of the command, and is applied by ``env -i`` to the provision
        scripts and the command only, once they run as the allocation's user."""
        arguments = [WRAPPER_NAME, *self.environment_arguments(), *self._exec_command()]
        if self.isolation is Isolation.NAMESPACE:
            steps = self._namespace_setup()
            here = f"/proc/self/fd/{SANDBOX_FD}"
            steps += self._scripts(lambda path: f"{here}/{path.relative_to(self.root)}")
            mount = tool("mount")
            steps += [
                f"{mount} -o remount,bind,ro {shlex.quote(m.target)}"
                for m in self.mounts
                if m.read_only
            ]
            steps += [f"echo started > {here}/{STATUS_FIFO}", f"exec {SANDBOX_FD}<&-"]
            steps += init_steps(f'{self._drop()}{tool("env")} {DEFAULT_SIGNALS} -i -- "$@"')
            shell = [SHELL, "-c", "\n".join(steps), *arguments]
            unshare = [tool("unshare"), "--mount", "--propagation", "private"]
            unshare += ["--pid", "--fork", "--kill-child", "--"]
            return [*unshare, *shell]
        locked = [shlex.quote(str(m.source)) for m in self.locked()]
        chmod = tool("chmod")
        steps = ["set -e", f"cd {shlex.quote(self.workdir)}"]
        steps += [f"{chmod} -R u+w {path}" for path in locked]
        steps += self._scripts(lambda path: shlex.quote(str(path)))
        steps += [f"{chmod} -R a-w {path}" for path in locked]
        steps += [f"echo started > {shlex.quote(str(self.status_fifo))}"]
        steps += [f'exec {tool("env")} {DEFAULT_SIGNALS} -i -- "$@"']
        return [SHELL, "-c", "\n".join(steps), *arguments]

    def environment_arguments(self) -> list[str]:
        """The allocation's environment as ``env``'s ``NAME=VALUE`` arguments."""
        return [f"{name}={value}" for name, value in self.environment.items()]

    def _exec_command(self) -> tuple[str, ...]:
        """The command as ``env`` must be given it: a program whose name holds ``=`` would be
        taken for one more variable, so such a one is started through a shell."""
        if "=" not in self.command[0]:
            return self.command
        return (SHELL, "-c", 'exec "$@"', WRAPPER_NAME, *self.command)

    def _with_environment(self) -> str:
        """``env -i`` with the allocation's environment, from the shell's first arguments."""
        count = len(self.environment)
        return " ".join([tool("env"), "-i", "--", *(f'"${{{i}}}"' for i in range(1, count + 1))])

    def _namespace_setup(self) -> list[str]:
        """Stage every source, open the sandbox, then mount (parents before what they contain)
        and change to the working directory."""
        in_sandbox = Path(self.workdir).is_relative_to(self.root)
        steps = ["set -e", f"{tool('mount')} -t proc proc /proc"]  # its PID namespace's
        if in_sandbox:  # before any mount can hide it
            steps.append(f"cd {shlex.quote(self.workdir)}")
        steps.append(f"exec {SANDBOX_FD}< {shlex.quote(str(self.root))}")
        order = sorted(range(len(self.mounts)), key=lambda i: self.mounts[i].depth)
        for i in order:
            source, stage = shlex.quote(str(self.mounts[i].source)), shlex.quote(str(self.stage(i)))
            steps.append(f"{tool('mount')} --bind {source} {stage}")
        for i in order:
            m = self.mounts[i]
            target = shlex.quote(m.target)
            if self._nested(m):
                parent = shlex.quote(str(PurePosixPath(m.target).parent))
                mkdir = tool("mkdir")
                make = (
                    f"{mkdir} -p {parent} && : > {target}" if m.is_file else f"{mkdir} -p {target}"
                )
                steps.append(f"[ -e {target} ] || {{ {make}; }}")
            staged = f"/proc/self/fd/{SANDBOX_FD}/{self.stage(i).relative_to(self.root)}"
            steps.append(f"{tool('mount')} --bind {staged} {target}")
        if not in_sandbox:
            steps.append(f"cd {shlex.quote(self.workdir)}")
        return steps

    def _scripts(self, path_of: Callable[[Path], str]) -> list[str]:
        """Run each script; the first to fail reports ``failed <index> <code>`` and ends the
        set-up with its code."""
        fifo = (
            f"/proc/self/fd/{SANDBOX_FD}/{STATUS_FIFO}"
            if self.isolation is Isolation.NAMESPACE
            else shlex.quote(str(self.status_fifo))
        )
        return [
            f"{self._drop()}{self._with_environment()} {SHELL} {path_of(script)} || "
            f'{{ s=$?; echo "failed {i} $s" > {fifo}; exit "$s"; }}'
            for i, script in enumerate(self.scripts)
        ]

    def _drop(self) -> str:
        """What runs a command of the set-up as the allocation's user: ``setpriv`` when the
        set-up runs as root to mount (``namespace``), else nothing (the shell is that user
        already, or the devnet's own)."""
        if self.run_as is None or self.isolation is not Isolation.NAMESPACE:
            return ""
        return shlex.join(self.run_as.setpriv()) + " "

    def host_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` (e.g. a health check) as it must be written to run beside the process:
        its paths rewritten (``rewrite`` mode), then started by ``env -i`` in the allocation's
        environment (a program named with ``=`` through a shell, as the command is)."""
        if self.isolation is Isolation.REWRITE:
            rewrite = PathRewriter(self.paths)
            argv = [rewrite(arg) for arg in argv]
        if argv and "=" in argv[0]:
            argv = [SHELL, "-c", 'exec "$@"', WRAPPER_NAME, *argv]
        return [tool("env"), "-i", "--", *self.environment_arguments(), *argv]


def command_of(params: Mapping[str, Any]) -> tuple[str, ...]:
    """What the devnet runs for an allocation whose ``execution.params`` are ``params``: its
    ``entrypoint`` + ``cmd`` (empty: the image's own, where it can run the image)."""
    return _strings(params.get("entrypoint"), "execution.entrypoint") + _strings(
        params.get("cmd"), "execution.cmd"
    )


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

    def script(self, body: bytes) -> bytes:
        """A provision script with its declared paths rewritten (bytes that are not UTF-8 are
        kept as they are)."""
        return self(body.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def missing_host_paths(volumes: Iterable[VolumeConfig] | None) -> list[str]:
    """Why each host directory that the ``local`` ``volumes`` bind cannot be bound (one line
    each: it does not exist, or is not a directory), in Docker's words."""
    reasons = []
    for i, volume in enumerate(volumes or ()):
        src = volume.src or ""
        if volume.type == "local" and src.startswith("/") and not os.path.isdir(src):
            what = "does not exist" if not os.path.exists(src) else "is not a directory"
            reasons.append(f"volume[{i}].src {src!r}: bind source path {what} on the host")
    return reasons


def named_volumes(config: AllocationDeploymentConfig) -> tuple[str, ...]:
    """The named ``local`` volumes ``config`` uses (a ``src`` without ``/``)."""
    return tuple(
        v.src for v in config.volume or () if v.type == "local" and v.src and "/" not in v.src
    )


def plan_sandbox(
    root: Path,
    config: AllocationDeploymentConfig,
    isolation: Isolation,
    *,
    volumes: Path,
    shared: Collection[str] = (),
    run_as: RunAs | None = None,
    image: str = "",
) -> SandboxPlan:
    """Lay out the sandbox for ``config`` under ``root`` (nothing is written yet); named
    volumes live under ``volumes``, and those in ``shared`` are used by other allocations;
    ``run_as``: the allocation's user, when not the devnet's own; ``image``: the image it
    runs in a container, at its declared paths as they are (:mod:`.images`)."""
    params: Mapping[str, Any] = config.execution.params or {}
    command = command_of(params)
    if not command and not image:
        raise SandboxError(f"no execution.cmd, and image {params.get('image')!r} cannot run here")
    rootfs = root / "rootfs"
    mounts: list[Mount] = []
    files: dict[Path, bytes] = {}
    for i, volume in enumerate(config.volume or ()):
        target = _container_path(volume.mount_destination, f"volume[{i}].mount_destination")
        if volume.type == "local" and "/" in volume.src:
            if not volume.src.startswith("/"):
                raise SandboxError(f"volume[{i}].src {volume.src!r} must be an absolute path")
            mounts.append(Mount(Path(volume.src), target, volume.read_only))
        elif volume.type == "local" and volume.src:
            if not _VOLUME_NAME.fullmatch(volume.src):
                raise SandboxError(
                    f"volume[{i}].src {volume.src!r} is neither an absolute path nor a volume "
                    f"name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)"
                )
            mounts.append(
                Mount(
                    volumes / volume.src,
                    target,
                    volume.read_only,
                    owned=True,
                    shared=volume.src in shared,
                )
            )
        else:
            source = root / "volumes" / (volume.name or str(i))
            mounts.append(Mount(source, target, volume.read_only, owned=True))
    for i, key in enumerate(config.keys or ()):
        source = root / "keys" / str(i) / (PurePosixPath(key.dest).name or key.type or "key")
        files[source] = key.file.encode()
        if key.dest:
            target = _container_path(key.dest, f"keys[{i}].dest")
            mounts.append(Mount(source, target, read_only=True, is_file=True, owned=True))
    workdir_value = params.get("working_directory") or ""
    if not isinstance(workdir_value, str):
        raise SandboxError(f"execution.working_directory must be a string, got {workdir_value!r}")
    workdir = _container_path(workdir_value, "execution.working_directory") if workdir_value else ""
    table = {m.target: str(m.source) for m in mounts}
    if workdir and not any(_inside(workdir, m.target) for m in mounts):
        table[workdir] = str(rootfs / workdir.lstrip("/"))
    declared = _environment(params.get("environment"))
    if image:
        isolation, table = Isolation.NAMESPACE, {}
    scripts: list[Path] = []
    names = sorted(config.provision_scripts or {})
    rewrite = PathRewriter(table)
    for i, name in enumerate(names):
        path = root / "scripts" / f"{i}-{PurePosixPath(name).name}"
        body = (config.provision_scripts or {})[name]
        files[path] = rewrite.script(body) if isolation is Isolation.REWRITE else body
        scripts.append(path)
    if isolation is Isolation.REWRITE:
        if scripts:
            _check_shell_safe(table.values())
        command = tuple(rewrite(arg) for arg in command)
        declared = {name: rewrite(value) for name, value in declared.items()}
        cwd = rewrite(workdir) if workdir else str(root / "work")
    elif image:
        cwd = workdir  # the container's own ("": the image's)
    else:
        cwd = workdir if any(_inside(workdir, m.target) for m in mounts) else ""
        cwd = cwd or (table[workdir] if workdir else str(root / "work"))
    # A container's PATH and HOME are its image's.
    host = {"PATH": os.environ.get("PATH", DEFAULT_PATH), "HOME": str(root / "work")}
    environment = declared if image else {**host, **declared}
    return SandboxPlan(
        root=root,
        command=command,
        environment=environment,
        workdir=cwd,
        mounts=tuple(mounts),
        files=files,
        scripts=tuple(scripts),
        script_names=tuple(names),
        isolation=isolation,
        paths=table,
        memory_limit=config.resources.ram.size,
        cpu_limit=config.resources.cpu.cores,
        run_as=run_as,
        image=image,
        entrypoint=_strings(params.get("entrypoint"), "execution.entrypoint"),
    )


def _check_shell_safe(paths: Iterable[str]) -> None:
    """Rewriting splices sandbox paths into a provision script's text unquoted: one that the
    shell would split (``/my data`` into ``/my`` and ``data``) could make the script write
    outside the sandbox, so such scripts are refused."""
    for path in paths:
        if shlex.quote(path) != path:
            raise SandboxError(
                f"provision scripts cannot be path-rewritten safely: {path!r} would need "
                f"quoting in shell text; use paths of letters, digits and @%+=:,./_- only "
                f"(for the devnet's own, its work directory) or namespace isolation"
            )


def materialise(plan: SandboxPlan) -> None:
    """Create the sandbox's directories and files, those the allocation writes given to its
    user (blocking: run it in a thread)."""
    for sub in ("work", "rootfs"):
        (plan.root / sub).mkdir(parents=True, exist_ok=True)
    for path, data in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o600 if "keys" in path.parts else 0o700)
    for i, m in enumerate(plan.mounts):
        if m.owned and not m.is_file:
            m.source.mkdir(parents=True, exist_ok=True)
        elif not m.owned and not m.source.is_dir():
            raise SandboxError(f"volume source {m.source} is not a directory on this host")
        if plan.isolation is Isolation.NAMESPACE and not plan.image:
            stage = plan.stage(i)
            stage.parent.mkdir(parents=True, exist_ok=True)
            if m.is_file:
                stage.touch()
            else:
                stage.mkdir(exist_ok=True)
    if Path(plan.workdir).is_relative_to(plan.root):
        Path(plan.workdir).mkdir(parents=True, exist_ok=True)
    if plan.image:
        _open_to_container(plan)
    elif plan.run_as is not None:
        _give(plan, plan.run_as)


def _open_to_container(plan: SandboxPlan) -> None:
    """A container runs as its image's user, whoever that is, with the pod's group added
    (:mod:`.images`): the volumes the devnet made are the pod's user's and group's
    (``2770``, new files keeping the group), else (no user of its own) everyone's (``1777``,
    as an emptyDir); scripts and keys are readable; the sandbox around them is the devnet's
    alone (``0700``), so that no host user reaches them through it."""
    for path in plan.files:
        path.chmod(0o755 if path in plan.scripts else 0o644)
    for m in plan.mounts:
        if m.owned and not m.is_file:
            if plan.run_as is not None:
                plan.run_as.give(m.source)
            m.source.chmod(0o2770 if plan.run_as is not None else 0o1777)
    plan.root.chmod(0o700)


def _give(plan: SandboxPlan, run_as: RunAs) -> None:
    """Give the allocation's user what it writes: ``work``, ``rootfs`` (down to the working
    directory), its files, and the volumes the devnet made — readable by that user alone
    (directories 0700, files 0600, scripts 0700). The sandbox directory, the logs and
    ``stage/`` stay the devnet's, so that the allocation cannot swap them for links; the
    sandbox directory lets the allocation's group pass through it, and nobody else."""
    rootfs = plan.root / "rootfs"
    for path in (plan.root / "work", rootfs, *rootfs.rglob("*")):
        _own(path, run_as, 0o700)
    for path in plan.files:
        _own(path, run_as, 0o700 if path in plan.scripts else 0o600)
        for parent in path.relative_to(plan.root).parents[:-1]:
            _own(plan.root / parent, run_as, 0o700)
    for m in plan.mounts:
        if m.owned and m.source.exists() and not m.is_file:
            _own(m.source, run_as, 0o700)
    os.chown(plan.root, os.geteuid(), run_as.gid)
    plan.root.chmod(0o710)


def _own(path: Path, run_as: RunAs, mode: int) -> None:
    """``path`` (never followed if a link) given to ``run_as`` with ``mode``."""
    run_as.give(path)
    if not path.is_symlink():
        path.chmod(mode)
