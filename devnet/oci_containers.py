"""The devnet's executor with images: an allocation whose image is in Podman's storage runs
in a container (see :mod:`.images`), any other as a host process (:mod:`.executor`).

A container run is an :class:`~.executor.Execution` whose process is ``podman logs
--follow`` (its output is the container's, from its start) and whose PID, once started, is
the container's first process on the host: what the usage meter measures and what a SIGKILL
fault ends (with its PID namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
from pathlib import Path
from typing import Any

from ..behaviors.ensemble import HealthCheckManifest
from .confinement import RunAs, Watchdog, child_setup
from .executor import Execution, ProcessExecutor, health_verdict, status_fifo
from .images import ImageConfig, Images, OciRuntime, container_name, create_arguments
from .output import OutputCopies
from .protocol import AllocationDeploymentConfig
from .sandbox import Mount, SandboxError, SandboxPlan
from .tools import SETUP_ENVIRONMENT


async def start_container(
    runtime: OciRuntime,
    plan: SandboxPlan,
    image: ImageConfig,
    network: Path | None,
    started: tuple[int, int, OutputCopies],
    watchdog: Watchdog | None,
) -> ContainerExecution:
    """Create and start ``plan``'s container (a failure is a :class:`SandboxError` with
    Podman's words), then follow its output; ``started``: the status FIFO's descriptor,
    where this run's stderr begins, and the output copies."""
    name = container_name(plan)
    await runtime.call("rm", "--force", "--time", "0", name)  # a previous run's
    for step in (create_arguments(runtime, plan, image, network), ["start", name]):
        code, _, err = await runtime.call(*step)
        if code != 0:
            if step[0] == "start":
                await runtime.call("rm", "--force", "--time", "0", name)
            raise SandboxError(f"podman {step[0]}: {err.strip()}")
    status_fd, stderr_at, output = started
    # Its log file from the start: what it wrote before this follows it is not lost.
    proc = await asyncio.create_subprocess_exec(
        *runtime.argv("logs", "--follow", name),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=output.stdout.write_fd,
        stderr=output.stderr.write_fd,
        env=SETUP_ENVIRONMENT,
        start_new_session=True,
        preexec_fn=child_setup(os.getpid()),
    )
    return ContainerExecution(proc, plan, status_fd, stderr_at, output, watchdog, runtime, name)


class ContainerExecution(Execution):
    """A container run: started, stopped, killed and waited for through Podman."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        plan: SandboxPlan,
        status_fd: int,
        stderr_at: int,
        output: OutputCopies,
        watchdog: Watchdog | None,
        runtime: OciRuntime,
        name: str,
    ) -> None:
        super().__init__(proc, plan, status_fd, stderr_at, output, watchdog)
        self.runtime = runtime
        self.name = name
        self._ended: asyncio.Future[int] | None = None
        self._oom = False
        self._stopped = False
        """Whether the devnet itself killed or stopped it (then a SIGKILL was not the OOM's)."""

    @property
    def returncode(self) -> int | None:
        done = self._ended is not None and self._ended.done()
        return self._ended.result() if done and self._ended is not None else None

    @property
    def sampled(self) -> bool:
        return False  # Podman's --memory is the kernel's limit

    @property
    def oom_killed(self) -> bool:
        return self._oom

    async def provisioned(self, timeout_s: float) -> None:
        """The container has started: take its first process's PID (if it still runs),
        then wait for its provision scripts, if any."""
        code, out, _ = await self.runtime.call("inspect", "--format", "{{.State.Pid}}", self.name)
        if code == 0 and out.strip().isdigit() and int(out) > 0:
            self.pid = int(out)
        if self.plan.scripts:
            await super().provisioned(timeout_s)
        else:
            os.close(self._status_fd)

    def signal(self, sig: int) -> None:
        """Signal the container's first process (its PID namespace ends with it), if it is
        known and still runs."""
        if self.pid != self.proc.pid and self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self._stopped = True
        self.signal(signal.SIGKILL)

    async def stop(self, grace_s: float) -> int:
        """``podman stop``: the image's stop signal, SIGKILL after ``grace_s``; the exit code."""
        if self._ended is None or not self._ended.done():
            self._stopped = True
            await self.runtime.call(
                "stop",
                "--time",
                str(math.ceil(max(0.0, grace_s))),
                self.name,
                timeout_s=grace_s + 30,
            )
        return await self.wait()

    async def wait(self) -> int:
        """The container's exit code (Podman's, OOM kill noted) once it has ended; then it is
        removed."""
        if self._ended is None:
            ended = self._ended = asyncio.get_running_loop().create_future()
            try:
                ended.set_result(await self._end())
            except asyncio.CancelledError:
                self._ended = None  # the next caller waits afresh
                ended.cancel()
                raise
            except Exception as exc:
                ended.set_exception(exc)
                raise
        return await asyncio.shield(self._ended)

    async def _end(self) -> int:
        code = await self.proc.wait()
        await self._output.drained()
        state = "{{.State.ExitCode}} {{.State.OOMKilled}}"
        found, out, _ = await self.runtime.call("inspect", "--format", state, self.name)
        if found == 0 and len(out.split()) == 2:
            exit_code, oom = out.split()
            code, self._oom = int(exit_code), oom == "true"
        # Where Podman's monitor misses the kernel's OOM kills (cgroup v1 with a hybrid
        # layout), a SIGKILL nobody here sent to a run with a memory limit is taken for one.
        killed = code == 128 + signal.SIGKILL and not self._stopped
        self._oom = self._oom or (killed and bool(self.plan.memory_limit))
        if self._watchdog is not None:
            self._watchdog.forget(self.proc.pid)
        await self.runtime.call("rm", "--force", "--time", "0", self.name)
        return code


class ImageExecutor(ProcessExecutor):
    """:class:`~.executor.ProcessExecutor`, with each allocation whose image ``images`` can
    run started in a container instead."""

    def __init__(self, *args: Any, images: Images, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.images = images

    async def prepare(
        self, allocation_id: str, config: AllocationDeploymentConfig, ensemble_id: str = ""
    ) -> SandboxPlan:
        """As for a host process; then, for a container (whose user may be root), refuse a
        host directory that the pod's own user could not use as the volume asks: a container
        must not be a way around the user a pod is given."""
        plan = await super().prepare(allocation_id, config, ensemble_id)
        if plan.image and plan.run_as is not None:
            for m in plan.mounts:
                if not m.owned:
                    _check_bindable(m, plan.run_as)
        return plan

    async def runnable_image(self, config: AllocationDeploymentConfig) -> str:
        image = (config.execution.params or {}).get("image")
        if isinstance(image, str) and await self.images.config(image) is not None:
            return image
        return ""

    async def run(self, plan: SandboxPlan) -> Execution:
        if not plan.image:
            return await super().run(plan)
        runtime, image = await self.images.runtime(), await self.images.config(plan.image)
        if runtime is None or image is None:
            raise SandboxError(f"image {plan.image!r} is no longer in Podman's storage")
        status_fd, stderr_at = await asyncio.to_thread(status_fifo, plan)
        output = OutputCopies(plan.stdout, plan.stderr)
        namespace = self.network.namespace(plan.root.name)
        try:
            execution = await start_container(
                runtime,
                plan,
                image,
                namespace.path if namespace is not None else None,
                (status_fd, stderr_at, output),
                self.watchdog,
            )
        except BaseException:
            os.close(status_fd)
            output.close()
            raise
        output.started()
        return execution

    async def check_health(
        self, execution: Execution, check: HealthCheckManifest, timeout_s: float
    ) -> str:
        """An ``exec`` check runs in the container (``podman exec``); the rest as for a host
        process (an HTTP check reaches the allocation's network namespace)."""
        if not isinstance(execution, ContainerExecution) or check.type == "http":
            return await super().check_health(execution, check, timeout_s)
        if not check.exec:
            return "the health check has no command"
        code, out, err = await execution.runtime.call(
            "exec", execution.name, *check.exec, timeout_s=timeout_s
        )
        return health_verdict(code, out + err, check.response.value)


def _check_bindable(mount: Mount, run_as: RunAs) -> None:
    """Refuse ``mount``'s host directory unless ``run_as`` may reach it and read it (and
    write it, unless it is read-only), as it would have to were the pod a host process."""
    where = mount.source.resolve()
    blocked = [d for d in (*reversed(where.parents), where) if not run_as.permits(d, 0o1)]
    need = 0o5 if mount.read_only else 0o7
    if blocked or not run_as.permits(where, need):
        what = "enter" if blocked else "read" if mount.read_only else "read and write"
        raise SandboxError(
            f"volume {mount.target}: the pod's user ({run_as.describe()}) cannot {what} "
            f"{blocked[0] if blocked else where} on this host, so its container may not bind "
            f"it either; give that user access, or use a named volume"
        )
