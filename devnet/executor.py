"""The devnet's process executor: an allocation's ``entrypoint`` + ``cmd`` as a host process.

It stands in for the DMS's docker executor: no image is pulled, the command runs directly on
the host, in the allocation's sandbox (:mod:`.sandbox`), as an asyncio subprocess in its own
process group (so a stop reaches every process it started), with stdout and stderr appended to
the sandbox's log files. Exit codes are the process's own; a process killed by signal N exits
with ``-N`` as in :mod:`subprocess`.

Namespace isolation (root with a working ``unshare --mount``) is probed once, asynchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path

import aiohttp

from dmsgw.behaviors.ensemble import HealthCheckManifest
from dmsgw.devnet.protocol import AllocationDeploymentConfig
from dmsgw.devnet.sandbox import (
    Isolation,
    Mount,
    SandboxError,
    SandboxPlan,
    materialise,
    plan_sandbox,
)

OUTPUT_LIMIT = 4096
"""How much of a health check's output is kept for its verdict."""


async def probe_isolation(preferred: Isolation | None = None) -> Isolation:
    """``namespace`` when this process is root and ``unshare --mount`` works, else
    ``rewrite``; ``preferred`` forces one (``namespace`` fails clearly if impossible)."""
    if preferred is Isolation.REWRITE:
        return preferred
    possible = os.geteuid() == 0 and all(shutil.which(t) for t in ("unshare", "mount", "nsenter"))
    if possible:
        proc = await asyncio.create_subprocess_exec(
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "true",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        possible = await proc.wait() == 0
    if preferred is Isolation.NAMESPACE and not possible:
        raise SandboxError(
            "namespace isolation needs root and a working `unshare --mount` (and nsenter)"
        )
    return Isolation.NAMESPACE if possible else Isolation.REWRITE


class MountPoints:
    """Mount points made on the host for namespaced allocations, removed when none uses them.

    A bind mount needs its target to exist; inside a private mount namespace the bind is
    invisible to the host, but a directory or file created for it is not, so each one created
    here is counted and removed again (only if still empty) by the last allocation using it.
    """

    def __init__(self) -> None:
        self._users: dict[Path, int] = {}
        self._created: dict[Path, list[Path]] = {}

    def acquire(self, mounts: Iterable[Mount]) -> None:
        for m in mounts:
            target = Path(m.target)
            self._users[target] = self._users.get(target, 0) + 1
            if self._users[target] > 1 or target.exists():
                continue
            created: list[Path] = []
            missing = [p for p in (target, *target.parents) if not p.exists()]
            for path in reversed(missing):
                if path == target and m.is_file:
                    path.touch()
                else:
                    path.mkdir()
                created.append(path)
            self._created[target] = created

    def release(self, mounts: Iterable[Mount]) -> None:
        for m in mounts:
            target = Path(m.target)
            users = self._users.get(target, 0) - 1
            if users > 0:
                self._users[target] = users
                continue
            self._users.pop(target, None)
            for path in reversed(self._created.pop(target, [])):
                with contextlib.suppress(OSError):  # no longer empty: not ours to remove
                    if path.is_file() and path.stat().st_size == 0:
                        path.unlink()
                    elif path.is_dir():
                        path.rmdir()


class Execution:
    """One run of an allocation's process."""

    def __init__(self, proc: asyncio.subprocess.Process, plan: SandboxPlan) -> None:
        self.proc = proc
        self.plan = plan
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    def signal(self, sig: int) -> None:
        """Signal the whole process group (the wrapper shell's children too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    async def stop(self, grace_s: float) -> int:
        """SIGTERM, then SIGKILL after ``grace_s``; the exit code."""
        if self.proc.returncode is None:
            self.signal(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self.proc.wait(), grace_s)
            except TimeoutError:
                self.kill()
        code = await self.proc.wait()
        self.kill()  # anything the command left behind in its group
        return code


class ProcessExecutor:
    """Runs allocations as processes in sandboxes under ``root``."""

    def __init__(self, root: Path, isolation: Isolation) -> None:
        self.root = root
        self.isolation = isolation
        self.mount_points = MountPoints()

    def sandbox(self, allocation_id: str) -> Path:
        return self.root / allocation_id

    async def prepare(self, allocation_id: str, config: AllocationDeploymentConfig) -> SandboxPlan:
        """Plan and write the sandbox (raises :class:`SandboxError` for what cannot run)."""
        plan = plan_sandbox(self.sandbox(allocation_id), config, self.isolation)
        await asyncio.to_thread(materialise, plan)
        if plan.isolation is Isolation.NAMESPACE:
            await asyncio.to_thread(self.mount_points.acquire, plan.mounts)
        return plan

    async def run(self, plan: SandboxPlan) -> Execution:
        """Start the process; its output is appended to the sandbox's log files."""
        with plan.stdout.open("ab") as out, plan.stderr.open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                *plan.argv(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=dict(plan.environment),
                cwd=plan.root,
                start_new_session=True,
            )
        return Execution(proc, plan)

    async def release_mounts(self, plan: SandboxPlan) -> None:
        """Give back the host mount points made for ``plan`` (once its process is gone)."""
        if plan.isolation is Isolation.NAMESPACE:
            await asyncio.to_thread(self.mount_points.release, plan.mounts)

    @staticmethod
    async def remove_sandbox(plan: SandboxPlan) -> None:
        await asyncio.to_thread(shutil.rmtree, plan.root, True)

    @staticmethod
    async def read_logs(plan: SandboxPlan) -> tuple[bytes, bytes]:
        def read(path: Path) -> bytes:
            return path.read_bytes() if path.exists() else b""

        return await asyncio.to_thread(read, plan.stdout), await asyncio.to_thread(
            read, plan.stderr
        )

    async def check_health(
        self, execution: Execution, check: HealthCheckManifest, timeout_s: float
    ) -> str:
        """Run ``check`` against the running process; ``""`` when healthy, else why not."""
        expected = check.response.value
        if check.type == "http":
            return await _http_check(check, timeout_s)
        argv: Sequence[str] = execution.plan.host_command(check.exec or ())
        if not argv:
            return "the health check has no command"
        if execution.plan.isolation is Isolation.NAMESPACE:
            argv = ["nsenter", "--target", str(execution.pid), "--mount", "--", *argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(execution.plan.environment),
                cwd=execution.plan.root,
            )
        except OSError as exc:
            return f"health check command failed to start: {exc}"
        try:
            output, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"health check timed out after {timeout_s:g} s"
        text = output[:OUTPUT_LIMIT].decode(errors="replace")
        if proc.returncode != 0:
            return f"health check exited with {proc.returncode}: {text.strip()}"
        if expected and expected not in text:
            return f"health check output lacks {expected!r}"
        return ""


async def _http_check(check: HealthCheckManifest, timeout_s: float) -> str:
    url = check.endpoint if "://" in check.endpoint else f"http://127.0.0.1{check.endpoint}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(url) as response,
        ):
            body = await response.text(errors="replace")
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"health check GET {url} failed: {exc or type(exc).__name__}"
    kind, expected = check.response.type, check.response.value
    if kind == "status" and expected:
        return "" if str(status) == expected else f"GET {url}: status {status}, not {expected}"
    if not 200 <= status < 300:
        return f"GET {url}: status {status}"
    if expected and expected not in body:
        return f"GET {url}: the body lacks {expected!r}"
    return ""
