"""The devnet's process executor: an allocation's ``entrypoint`` + ``cmd`` as a host process.

It stands in for the DMS's docker executor (``executor/docker``) where the allocation's image
cannot run (:mod:`.oci_containers` runs those it can): no image is pulled, the command runs
directly on the host, in the allocation's sandbox (:mod:`.sandbox`), as an asyncio
subprocess in its own process group, with stdout and stderr appended to the sandbox's log
files as they arrive, with when (:mod:`.output`) — as an unprivileged user when the devnet is
root, and never outliving the devnet (:mod:`.confinement`). What it keeps of Docker's behaviour:

* **Exit codes** as Docker reports them: the process's own, or 128 + N for a process killed by
  signal N (137 for SIGKILL, 143 for SIGTERM).
* **Stop** as ``docker stop`` (``StopContainer``): SIGTERM to the main process only, SIGKILL to
  the whole process group after the grace period (and to whatever is left once the main
  process has exited, as Docker ends a container's every process with its PID 1).
* **Memory and CPU**: ``resources.ram.size`` and ``resources.cpu.cores`` are enforced by the
  kernel where the host lets the devnet write cgroups (:mod:`.cgroups`): the OOM killer
  SIGKILLs the largest process of the run's group however short its burst (Docker does not
  set ``memory.oom.group``, so only that process dies), and the CPU is throttled to its
  quota. Elsewhere the memory limit is enforced by sampling the resident memory of the main
  process and its descendants every :data:`MEMORY_SAMPLE_S` and SIGKILLing the largest of
  them above the limit, until the rest fits; a burst shorter than a sample passes unseen, and
  the CPU is not limited. Either way the run ends with the main process: 137 when it was the
  victim, else whatever it makes of its child's death (the pod wrapper reports it and exits
  with it), with the DMS's "container was killed due to OOM". (``RLIMIT_AS``/``RLIMIT_DATA``
  are not used: they cap reserved address space, which runtimes such as Go, Java or Node
  reserve far beyond what they use, and they make an allocation fail — a ``MemoryError``, a
  ``malloc`` returning ``NULL``, exit 1 or whatever the program makes of it — rather than
  killing, so an OOM kill could not be told apart from the program's own failure.)
* **Named volumes**: a ``local`` volume whose ``src`` is a name lives in the node's volume
  directory (:class:`~.host_paths.NamedVolumes`).

Namespace isolation (root with a working ``unshare --mount --pid``, ``nsenter`` and
``setpriv``) is probed once, asynchronously; a devnet that is not root runs each allocation in
user namespaces of its own where the kernel allows it (:mod:`.userns`). Either way the
allocation's process is ``unshare``, whose child is the init of the allocation's PID namespace:
``docker stop``'s SIGTERM goes to that init, which passes it on to the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..behaviors.ensemble import HealthCheckManifest
from .cgroups import Cgroups, RunGroup
from .confinement import Identities, RunAs, Watchdog, child_setup
from .forwarding import AllocationNetworks
from .host_paths import MountPoints, NamedVolumes, remove_tree
from .http_check import http_check
from .output import OutputCopies
from .protocol import AllocationDeploymentConfig
from .sandbox import Isolation, SandboxError, SandboxPlan, materialise, named_volumes, plan_sandbox
from .tools import SETUP_ENVIRONMENT, have, tool
from .userns import Connector, UserNamespaces, init_of

OUTPUT_LIMIT = 4096
"""How much of a health check's output, or of a failed set-up's stderr, is kept."""
MEMORY_SAMPLE_S = 0.1
"""How often an allocation's resident memory is compared with its ``ram.size``."""
OOM_ERROR = "container was killed due to OOM"
"""The DMS docker handler's words for an allocation killed for its memory."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


async def probe_isolation(preferred: Isolation | None = None) -> Isolation:
    """``namespace`` when this process is root and ``unshare`` makes mount and PID
    namespaces, else ``rewrite``; ``preferred`` forces one (``namespace`` fails clearly if
    impossible)."""
    if preferred is Isolation.REWRITE:
        return preferred
    possible = os.geteuid() == 0 and have("unshare", "mount", "nsenter", "setpriv")
    if possible:
        proc = await asyncio.create_subprocess_exec(
            tool("unshare"),
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--kill-child",
            tool("mount"),
            "-t",
            "proc",
            "proc",
            "/proc",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=SETUP_ENVIRONMENT,
        )
        possible = await proc.wait() == 0
    if preferred is Isolation.NAMESPACE and not possible:
        raise SandboxError(
            "namespace isolation needs root and a working `unshare --mount --pid` (and nsenter, "
            "setpriv)"
        )
    return Isolation.NAMESPACE if possible else Isolation.REWRITE


def exit_status(returncode: int) -> int:
    """A process's exit status as Docker reports it: 128 + N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def resident_bytes(pid: int) -> dict[int, int]:
    """Resident memory of ``pid`` and of each of its descendants (those ``/proc/…/children``
    lists), by PID."""
    sizes: dict[int, int] = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        if current in sizes:
            continue
        proc = Path(f"/proc/{current}")
        try:
            sizes[current] = int((proc / "statm").read_text().split()[1]) * _PAGE
            for task in os.listdir(proc / "task"):
                children = (proc / "task" / task / "children").read_text().split()
                pending += [int(child) for child in children]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return sizes


def status_fifo(plan: SandboxPlan) -> tuple[int, int]:
    """Make ``plan``'s status FIFO afresh and open it (blocking); the descriptor, and where
    this run's stderr begins."""
    with contextlib.suppress(FileNotFoundError):
        plan.status_fifo.unlink()
    # A container's user, whoever it is, reports through its bind mount; the sandbox around
    # the FIFO is the devnet's alone.
    os.mkfifo(plan.status_fifo, 0o622 if plan.image else 0o600)
    if plan.image:
        plan.status_fifo.chmod(0o622)  # past the umask
    if plan.run_as is not None:  # in ``rewrite`` mode that user's set-up reports
        plan.run_as.give(plan.status_fifo)
    # Read-write, so that the FIFO has a reader before the set-up writes and no end-of-file
    # before it does.
    fd = os.open(plan.status_fifo, os.O_RDWR | os.O_NONBLOCK)
    return fd, plan.stderr.stat().st_size if plan.stderr.exists() else 0


class Execution:
    """One run of an allocation's process: its set-up, then its command."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        plan: SandboxPlan,
        status_fd: int,
        stderr_at: int,
        output: OutputCopies,
        watchdog: Watchdog | None = None,
        group: RunGroup | None = None,
        *,
        forks: bool = False,
        connector: Connector | None = None,
    ) -> None:
        self.proc = proc
        self.plan = plan
        self.pid = proc.pid
        self.group = group
        """The run's control groups (``None``: its memory is sampled, see :meth:`sampled`)."""
        self.forks = forks
        """Whether the process is ``unshare --fork``, whose child is the init of the run's
        PID namespace."""
        self.connector = connector
        """How the devnet connects into the run's network namespace, where :mod:`.userns`
        made it (``None``: the devnet reaches it otherwise, or it shares the host's)."""
        self._sampled_oom = False
        self._kernel_oom = False
        self._status_fd = status_fd
        self._stderr_at = stderr_at
        self._output = output
        self._watchdog = watchdog
        if watchdog is not None:
            watchdog.watch(self.pid)

    @property
    def returncode(self) -> int | None:
        code = self.proc.returncode
        return None if code is None else exit_status(code)

    @property
    def sampled(self) -> bool:
        """Whether the memory limit is left to :meth:`watch_memory` (no kernel limit)."""
        return bool(self.plan.memory_limit) and (self.group is None or self.group.memory is None)

    @property
    def oom_killed(self) -> bool:
        """Whether a process of the run was killed for its memory (by the kernel, or by
        :meth:`watch_memory`)."""
        if self.group is not None and not self._kernel_oom:
            self._kernel_oom = self.group.oom_kills() > 0
        return self._sampled_oom or self._kernel_oom

    async def wait(self) -> int:
        """The exit status, once the main process has ended (its OOM kills counted first:
        then its groups go, unless a descendant still holds them)."""
        code = exit_status(await self.proc.wait())
        if self.connector is not None:  # its network namespace is gone
            await asyncio.to_thread(self.connector.close)
        await self._output.drained()  # what it wrote is in the logs before its end is told
        if self.group is not None:
            _ = self.oom_killed
            self.group.remove()
        return code

    def signal(self, sig: int) -> None:
        """Signal the whole process group (the wrapper shell's children too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group; the watchdog need not watch it any more."""
        self.signal(signal.SIGKILL)
        if self._watchdog is not None:
            self._watchdog.forget(self.pid)

    @property
    def init(self) -> int:
        """The process a container's PID 1 is: the PID namespace's init where the run has
        one (``unshare`` passes no signal on), else the main process."""
        return (init_of(self.pid) if self.forks else None) or self.pid

    async def stop(self, grace_s: float) -> int:
        """``docker stop``: SIGTERM to the main process only (its init passes it on to the
        command, which handles it or not), SIGKILL to the group after ``grace_s``; the exit
        code."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self.proc.wait()
        self.kill()  # past the grace period, or whatever the main process left in its group
        return await self.wait()

    async def provisioned(self, timeout_s: float) -> None:
        """Wait until the set-up (mounts, provision scripts, read-only volumes) is done and the
        command is being started; :class:`SandboxError` says why it is not."""
        verdict = await self._status_line(timeout_s)
        if verdict == "started":
            return
        if verdict.startswith("failed "):
            _, index, code = verdict.split()
            self.kill()  # whatever the script left running
            await self.wait()  # and the run's groups go
            name = self.plan.script_names[int(index)]
            raise SandboxError(
                f"provision script {name!r} exited with {code}: {await self._stderr()}"
            )
        if self.proc.returncode is None:
            self.kill()
            await self.wait()
            raise SandboxError(f"the provision scripts did not finish within {timeout_s:g} s")
        self.kill()  # the set-up ended: whatever it left running
        await self.wait()  # its OOM kills counted, then its groups go
        if self.oom_killed:
            raise SandboxError(f"{OOM_ERROR} while it was being set up (ram.size)")
        raise SandboxError(
            f"the set-up exited with {self.returncode} before the command started: "
            f"{await self._stderr()}"
        )

    async def _status_line(self, timeout_s: float) -> str:
        """The set-up's report on the status FIFO (``""``: it ended or timed out first)."""
        loop = asyncio.get_running_loop()
        line: asyncio.Future[str] = loop.create_future()
        received = bytearray()

        def readable() -> None:
            with contextlib.suppress(BlockingIOError):
                received.extend(os.read(self._status_fd, 512))
            if b"\n" in received and not line.done():
                line.set_result(received.split(b"\n", 1)[0].decode(errors="replace"))

        loop.add_reader(self._status_fd, readable)
        ended = asyncio.ensure_future(self.proc.wait())
        try:
            first = asyncio.FIRST_COMPLETED
            await asyncio.wait((line, ended), timeout=timeout_s, return_when=first)
            if not line.done():
                readable()  # a report written just before the set-up ended
        finally:
            loop.remove_reader(self._status_fd)
            os.close(self._status_fd)
            ended.cancel()
        return line.result() if line.done() else ""

    async def _stderr(self) -> str:
        """What this run wrote to stderr (its last :data:`OUTPUT_LIMIT` bytes)."""

        def read() -> bytes:
            with self.plan.stderr.open("rb") as f:
                f.seek(self._stderr_at)
                return f.read()[-OUTPUT_LIMIT:]

        return (await asyncio.to_thread(read)).decode(errors="replace").strip()

    async def watch_memory(self) -> None:
        """While the process lives: whenever it and its descendants hold more resident memory
        than ``ram.size``, SIGKILL the largest of them (the OOM killer's choice)."""
        limit = self.plan.memory_limit
        while self.proc.returncode is None:
            sizes = resident_bytes(self.pid)
            if sum(sizes.values()) > limit:
                self._sampled_oom = True
                victim = max(sizes, key=sizes.__getitem__)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(victim, signal.SIGKILL)
            await asyncio.sleep(MEMORY_SAMPLE_S)


class ProcessExecutor:
    """Runs allocations as processes in sandboxes under ``root``, as ``run_as`` (``None``: as
    this process's user); named volumes live under ``volumes``; ``watchdog`` ends them if
    the devnet dies; ``network`` gives them their networks and forwards their public ports
    (one for all the devnet's nodes, which share the host)."""

    def __init__(
        self,
        root: Path,
        isolation: Isolation,
        volumes: Path,
        *,
        run_as: RunAs | None = None,
        watchdog: Watchdog | None = None,
        cgroups: Cgroups | None = None,
        network: AllocationNetworks | None = None,
        identities: Identities | None = None,
        userns: UserNamespaces | None = None,
    ) -> None:
        self.root = root
        self.isolation = isolation
        self.run_as = run_as
        self.identities = identities
        self.userns = userns
        """Not root: the user namespaces each allocation runs in (:mod:`.userns`)."""
        self.watchdog = watchdog
        self.cgroups = cgroups or Cgroups(())
        self.network = network or AllocationNetworks()
        self.mount_points = MountPoints()
        self.volumes = NamedVolumes(volumes)

    def sandbox(self, allocation_id: str) -> Path:
        return self.root / allocation_id

    def identity(self, allocation_id: str, ensemble_id: str) -> RunAs | None:
        """Who ``allocation_id`` runs as: the user the devnet was told to use for all, else
        its ensemble's own identity (a root devnet), else this process's user (``None``)."""
        if self.run_as is not None or self.identities is None:
            return self.run_as
        return self.identities.claim(ensemble_id or allocation_id, allocation_id)

    def _check_volumes_are_its_own(self, config: AllocationDeploymentConfig, run_as: RunAs) -> None:
        """Refuse a named volume that another pod's user made: with a user per pod, what one
        pod writes no other reads, and naming its volume must not be a way in."""
        for name in named_volumes(config):
            with contextlib.suppress(FileNotFoundError):
                if (self.volumes.root / name).stat().st_uid != run_as.uid:
                    raise SandboxError(
                        f"volume {name!r} belongs to another deployment: each deployment's "
                        f"volumes are its own on this devnet (it runs each pod as a user of "
                        f"its own); name a volume of this deployment's"
                    )

    def hold(self, allocation_id: str, config: AllocationDeploymentConfig) -> None:
        """Count ``allocation_id`` among the users of the named volumes it declares."""
        self.volumes.hold(allocation_id, named_volumes(config))

    async def prepare(
        self, allocation_id: str, config: AllocationDeploymentConfig, ensemble_id: str = ""
    ) -> SandboxPlan:
        """Plan and write the sandbox (raises :class:`SandboxError` for what cannot run), for
        the user of ``ensemble_id`` (see :meth:`identity`)."""
        run_as = self.identity(allocation_id, ensemble_id)
        if self.identities is not None and run_as is not None:
            self._check_volumes_are_its_own(config, run_as)
        plan = plan_sandbox(
            self.sandbox(allocation_id),
            config,
            self.isolation,
            volumes=self.volumes.root,
            shared=self.volumes.shared(allocation_id),
            run_as=run_as,
            image=await self.runnable_image(config),
        )
        async with self.volumes.lock:  # not while a volume it names is being removed
            await asyncio.to_thread(materialise, plan)
        if plan.isolation is Isolation.NAMESPACE and not plan.image:
            await asyncio.to_thread(self.mount_points.acquire, plan.outermost)
        return plan

    async def runnable_image(self, config: AllocationDeploymentConfig) -> str:
        """The image ``config`` runs in a container (``""``: none, it runs as a host process;
        see :class:`~.oci_containers.ImageExecutor`)."""
        return ""

    async def run(self, plan: SandboxPlan) -> Execution:
        """Start the set-up and command; output is appended to the sandbox's log files."""
        status_fd, stderr_at = await asyncio.to_thread(status_fifo, plan)
        try:
            group = await asyncio.to_thread(
                self.cgroups.run_group, plan.root.name, plan.memory_limit, plan.cpu_limit
            )
        except OSError as exc:
            os.close(status_fd)
            raise SandboxError(f"cannot set the allocation's resource limits: {exc}") from exc
        output: OutputCopies | None = None
        try:
            output = OutputCopies(plan.stdout, plan.stderr)
            argv = plan.argv()
            own_network = self.userns is not None and self.network.private_loopback
            if self.userns is not None:
                keep = [plan.root, *(m.source for m in plan.mounts if not m.is_file)]
                argv = self.userns.wrap(argv, keep, own_network)
            with self._network_of(plan) as network:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output.stdout.write_fd,
                    stderr=output.stderr.write_fd,
                    env=SETUP_ENVIRONMENT,
                    cwd=plan.root,
                    start_new_session=True,
                    **self._child_options(plan, group, network),
                )
        except BaseException:
            os.close(status_fd)
            if output is not None:
                output.close()
            if group is not None:
                group.close()
                group.remove()
            raise
        output.started()
        if group is not None:
            group.close()
        forks = self.userns is not None or plan.isolation is Isolation.NAMESPACE
        connector = Connector(self.userns, proc.pid) if self.userns and own_network else None
        if connector is not None:
            self.network.enter_through(plan.root.name, connector)
        return Execution(
            proc,
            plan,
            status_fd,
            stderr_at,
            output,
            self.watchdog,
            group,
            forks=forks,
            connector=connector,
        )

    @contextlib.contextmanager
    def _network_of(self, plan: SandboxPlan) -> Iterator[int | None]:
        """A descriptor on the network namespace of ``plan``'s allocation, for its processes
        to join (``None``: it shares the host's network)."""
        namespace = self.network.namespace(plan.root.name)
        if namespace is None:
            yield None
            return
        fd = os.open(namespace.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    @staticmethod
    def _child_options(
        plan: SandboxPlan, group: RunGroup | None = None, network: int | None = None
    ) -> dict[str, Any]:
        """How a process of an allocation is started: it joins the allocation's ``network``
        namespace (if it has one: only in ``namespace`` isolation, where the process starts as
        root) and the run's control ``group`` (if any), dies with the devnet, and runs as the
        allocation's user — at once, or (``namespace``) after the set-up mounted as root,
        through ``setpriv``."""
        fds = group.fds if group is not None else ()
        options: dict[str, Any] = {"preexec_fn": child_setup(os.getpid(), fds, network)}
        if plan.run_as is not None and plan.isolation is Isolation.REWRITE:
            options.update(plan.run_as.popen_options())
        return options

    async def release(self, allocation_id: str, plan: SandboxPlan | None) -> None:
        """Give back the host mount points made for ``plan`` (once its process is gone) and
        the named volumes ``allocation_id`` holds."""
        if plan is not None and plan.isolation is Isolation.NAMESPACE and not plan.image:
            await asyncio.to_thread(self.mount_points.release, plan.outermost)
        await self.volumes.release(allocation_id)

    async def remove_sandbox(self, allocation_id: str, plan: SandboxPlan | None) -> None:
        """Remove ``allocation_id``'s sandbox (its files and logs), then free its identity:
        nothing it owned is left for a later pod to be given."""
        if plan is not None:
            await asyncio.to_thread(remove_tree, plan.root)
        if self.identities is not None:
            self.identities.release(allocation_id)

    async def check_health(
        self, execution: Execution, check: HealthCheckManifest, timeout_s: float
    ) -> str:
        """Run ``check`` against the running process; ``""`` when healthy, else why not."""
        expected = check.response.value
        if check.type == "http":
            namespace = self.network.namespace(execution.plan.root.name)
            return await http_check(check, timeout_s, namespace, execution.connector)
        argv: Sequence[str] = execution.plan.host_command(check.exec or ())
        if not argv:
            return "the health check has no command"
        if self.userns is not None:
            argv = self.userns.enter(execution.init, argv, execution.connector is not None)
        elif execution.plan.isolation is Isolation.NAMESPACE:
            run_as = execution.plan.run_as
            drop = run_as.setpriv() if run_as is not None else []
            enter = [tool("nsenter"), "--target", str(execution.init), "--mount", "--pid", "--"]
            argv = [*enter, *drop, *argv]
        try:
            with self._network_of(execution.plan) as network:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    env=SETUP_ENVIRONMENT,
                    cwd=execution.plan.root,
                    start_new_session=True,  # nsenter forks into the PID namespace
                    **self._child_options(execution.plan, network=network),
                )
        except OSError as exc:
            return f"health check command failed to start: {exc}"
        try:
            async with asyncio.timeout(timeout_s):
                output, _ = await proc.communicate()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return f"health check timed out after {timeout_s:g} s"
        return health_verdict(proc.returncode or 0, output.decode(errors="replace"), expected)


def health_verdict(code: int, output: str, expected: str) -> str:
    """``""`` when a command health check that exited with ``code`` after writing
    ``output`` passed (exit 0, ``expected`` in the output, if given), else why not."""
    text = output[:OUTPUT_LIMIT]
    if code != 0:
        return f"health check exited with {code}: {text.strip()}"
    if expected and expected not in text:
        return f"health check output lacks {expected!r}"
    return ""
