"""Images on the devnet: an allocation whose image is in the machine's Podman storage runs in
a container, as the DMS's docker executor (``executor/docker``) runs it.

No registry is reached: an image runs only if it is already in Podman's local storage
(``podman build``, ``podman load``, ``podman pull`` beforehand). An allocation whose image is
not there runs its ``entrypoint`` + ``cmd`` as a host process (:mod:`.executor`), as before;
one that has neither is refused at ``deployment/new`` with a message naming this devnet limit
and how to lift it (:func:`why_not_runnable`).

A container is made with ``podman create`` — the image's own entrypoint and ``cmd`` unless
the allocation gives them (an ``entrypoint`` clears the image's ``cmd``, as Docker does), its
environment over the image's, its working directory, its volumes and key files bound at their
declared paths (``read_only`` ones read-only from the start), ``ram.size`` as ``--memory``
(swap included, so the kernel OOM-kills at the limit), ``cpu.cores`` as ``--cpus`` — then
started with ``podman start`` (which returns once it runs, or says why it cannot), and its
log followed with ``podman logs --follow``, whose stdout and stderr are the allocation's. It
joins the allocation's network namespace where the devnet makes one (so its private address,
its forwarded public ports and HTTP health checks are those of a host-process allocation), else
the host's network. Provision scripts run inside the container before the command, with
``/bin/sh`` (the image must have one), as a DMS runs them; they report on the sandbox's status
FIFO, bound into the container, as the host set-up does. Stop is ``podman stop`` (the image's
stop signal, then SIGKILL after the grace period); the exit code and the OOM kill are Podman's.

Some hosts (sandboxes with a hybrid cgroup layout and no ``CAP_SYS_RESOURCE``) refuse the
default OCI runtime's set-up; :func:`probe_runtime` then tries ``runc`` with cgroupfs and
resource limits (``nofile``, ``nproc``) no higher than the host lets a container set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import resource
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .sandbox import STATUS_FIFO, SandboxError, SandboxPlan
from .tools import SETUP_ENVIRONMENT, have, tool

TOOL_TIMEOUT_S = 60.0
"""How long one Podman command (create, inspect, stop's own bound aside) may take."""
SCRIPTS_AT = "/.dmsgw"
"""Where a container sees its provision scripts and the status FIFO (read-only but the FIFO)."""
LABEL = "dmsgw.devnet"
"""The label naming the devnet work directory a container belongs to."""
NPROC_CEILING = 32768
"""The ``nproc`` limit a container is given where the host refuses a higher one."""
_NAME = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclasses.dataclass(frozen=True)
class OciRuntime:
    """Podman, with the global options (``--runtime``, ``--cgroup-manager``) and the run options
    (``--ulimit``) under which this host lets it start containers."""

    program: str
    global_options: tuple[str, ...] = ()
    run_options: tuple[str, ...] = ()

    def argv(self, *args: str) -> list[str]:
        return [self.program, *self.global_options, *args]

    def describe(self) -> str:
        options = " ".join((*self.global_options, *self.run_options))
        return f"images run in podman{' (' + options + ')' if options else ''}"

    async def call(self, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> tuple[int, str, str]:
        """Run ``podman args``: its exit code, stdout and stderr (a hang is an error)."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=SETUP_ENVIRONMENT,
        )
        try:
            async with asyncio.timeout(timeout_s):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return 124, "", f"podman {args[0]} did not answer within {timeout_s:g} s"
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def _ulimits() -> tuple[str, ...]:
    """``--ulimit`` options no higher than this process's own hard limits."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], NPROC_CEILING)
    return ("--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}")


def candidates(program: str) -> list[OciRuntime]:
    """Podman as installed, then with ``runc`` and cgroupfs and lowered resource limits."""
    found = [OciRuntime(program)]
    if have("runc"):
        found.append(
            OciRuntime(
                program, ("--runtime", tool("runc"), "--cgroup-manager", "cgroupfs"), _ulimits()
            )
        )
    return found


async def starts_containers(runtime: OciRuntime) -> bool:
    """Whether ``runtime`` can start a container: one whose root is an empty directory with
    the host's ``/usr`` bound read-only, running ``true`` (no image needed)."""
    with tempfile.TemporaryDirectory(prefix="dmsgw-oci-probe-") as root:
        for link in ("bin", "sbin", "lib", "lib64"):
            os.symlink(f"usr/{link}", os.path.join(root, link))
        os.mkdir(os.path.join(root, "usr"))
        code, _, _ = await runtime.call(
            "run", "--rm", "--network", "none", *runtime.run_options,
            "-v", "/usr:/usr:ro", "--rootfs", root, "/usr/bin/true",
        )  # fmt: skip
    return code == 0


async def probe_runtime() -> OciRuntime | None:
    """The first way this host lets Podman start containers (``None``: no Podman, or none)."""
    if os.geteuid() != 0 or not have("podman"):
        return None  # rootless Podman needs subordinate IDs this devnet does not set up
    for runtime in candidates(tool("podman")):
        if await starts_containers(runtime):
            return runtime
    return None


@dataclasses.dataclass(frozen=True)
class ImageConfig:
    """What an image runs by default (its OCI config)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""

    @classmethod
    def parse(cls, inspected: Mapping[str, Any]) -> ImageConfig:
        config = inspected.get("Config") or {}
        return cls(
            tuple(config.get("Entrypoint") or ()),
            tuple(config.get("Cmd") or ()),
            tuple(config.get("Env") or ()),
            config.get("WorkingDir") or "",
            config.get("User") or "",
        )


class Images:
    """The images this devnet's nodes can run: Podman's local storage, probed on first need
    (``enabled=False``: never, every allocation runs as a host process)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._runtime: OciRuntime | None = None
        self._probed = False
        self._lock = asyncio.Lock()
        self._configs: dict[str, ImageConfig | None] = {}

    async def runtime(self) -> OciRuntime | None:
        """The OCI runtime, probed once."""
        async with self._lock:
            if not self._probed and self.enabled:
                self._runtime = await probe_runtime()
                if self._runtime is not None:
                    await remove_stale(self._runtime)
            self._probed = True
            return self._runtime

    async def close(self) -> None:
        """Remove the containers whose sandboxes are gone (if any container ran)."""
        if self._runtime is not None:
            await remove_stale(self._runtime)

    def describe(self) -> str:
        if not self.enabled:
            return "images not run (host commands only)"
        if not self._probed:
            return "images in Podman's storage run in containers (probed on first use)"
        if self._runtime is None:
            return "no OCI runtime: host commands only"
        return self._runtime.describe()

    async def config(self, image: str) -> ImageConfig | None:
        """``image``'s config if it is in local storage and containers can run here, else
        ``None`` (remembered for this devnet; the runtime is probed only for an image that is
        there, so allocations of images nobody built cost one look-up)."""
        if not image or not self.enabled or os.geteuid() != 0 or not have("podman"):
            return None
        if image not in self._configs:
            found = None
            code, out, _ = await OciRuntime(tool("podman")).call("image", "inspect", image)
            if code == 0 and await self.runtime() is not None:
                found = ImageConfig.parse(json.loads(out)[0])
            self._configs[image] = found
        return self._configs[image]


def why_not_runnable(image: str, runtime_missing: bool) -> str:
    """The devnet-limit message for an allocation with no command whose image cannot run."""
    if runtime_missing:
        how = (
            "run the devnet as root with Podman installed and able to start containers, "
            "and load the image into its storage"
        )
    else:
        how = f"load the image into Podman's storage (podman build/load/pull {image or 'IMAGE'})"
    return (
        f"devnet limit, not a DMS rule: image {image!r} cannot run here, and the allocation "
        f"gives no execution.cmd or entrypoint to run as a host command instead (the devnet "
        f"pulls no image); to lift it, {how}, or give execution.cmd"
    )


def container_name(plan: SandboxPlan) -> str:
    """A container name unique to this devnet's allocation (Podman's name rule): the devnet's
    work directory, its node, the allocation."""
    devnet, node = plan.root.parent.parent.parent.name, plan.root.parent.parent.name
    return _NAME.sub("_", f"dmsgw-{devnet}-{node}-{plan.root.name}")


def create_arguments(
    runtime: OciRuntime, plan: SandboxPlan, image: ImageConfig, network: Path | None
) -> list[str]:
    """``podman create`` for ``plan``: the options, the image, then its arguments."""
    options = ["create", "--name", container_name(plan), "--label", f"{LABEL}={plan.root}"]
    options += ["--network", f"ns:{network}" if network is not None else "host"]
    options += [*runtime.run_options, "--pull", "never", "--log-driver", "k8s-file"]
    if plan.run_as is not None:  # the volumes the devnet made are the pod's group's
        options += ["--group-add", str(plan.run_as.gid)]
    for name, value in plan.environment.items():
        options += ["--env", f"{name}={value}"]
    if plan.workdir:
        options += ["--workdir", plan.workdir]
    for m in plan.mounts:
        options += ["--volume", f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
    if plan.memory_limit:
        options += ["--memory", str(plan.memory_limit), "--memory-swap", str(plan.memory_limit)]
    if plan.cpu_limit:
        options += ["--cpus", f"{plan.cpu_limit:g}"]
    entrypoint, cmd = plan.command[: len(plan.entrypoint)], plan.command[len(plan.entrypoint) :]
    if plan.scripts:
        options += ["--volume", f"{plan.root / 'scripts'}:{SCRIPTS_AT}/scripts:ro"]
        options += ["--volume", f"{plan.status_fifo}:{SCRIPTS_AT}/{STATUS_FIFO}:rw"]
        wrapper = ["/bin/sh", "-c", _script_wrapper(plan), "dmsgw-allocation"]
        options += ["--entrypoint", json.dumps(wrapper)]
        return [*options, plan.image, *effective_command(plan, image)]
    if entrypoint:
        options += ["--entrypoint", json.dumps(list(entrypoint))]
    return [*options, plan.image, *cmd]


def effective_command(plan: SandboxPlan, image: ImageConfig) -> tuple[str, ...]:
    """What the container runs, as Docker composes it: the allocation's ``entrypoint`` with
    its ``cmd`` (an entrypoint clears the image's ``cmd``), else the image's entrypoint with
    the allocation's ``cmd`` or, failing that, the image's."""
    if plan.entrypoint:
        return plan.command
    command = (*image.entrypoint, *(plan.command or image.cmd))
    if not command:
        raise SandboxError(
            f"image {plan.image!r} has no entrypoint or cmd, and the allocation gives none"
        )
    return command


def _script_wrapper(plan: SandboxPlan) -> str:
    """The shell that runs the provision scripts in the container, reports on the status
    FIFO (``failed <i> <code>`` or ``started``), then execs the command."""
    fifo = f"{SCRIPTS_AT}/{STATUS_FIFO}"
    steps = [
        f"/bin/sh {SCRIPTS_AT}/scripts/{shlex.quote(script.name)} || "
        f'{{ s=$?; echo "failed {i} $s" > {fifo}; exit "$s"; }}'
        for i, script in enumerate(plan.scripts)
    ]
    return "\n".join([*steps, f"echo started > {fifo}", 'exec "$@"'])


async def remove_stale(runtime: OciRuntime) -> None:
    """Remove the containers of devnets that are gone: those labelled with a sandbox that no
    longer exists (a devnet that was SIGKILLed leaves its containers to the next one)."""
    listing = ("ps", "-a", "--filter", f"label={LABEL}", "--format")
    code, out, _ = await runtime.call(*listing, f'{{{{.ID}}}} {{{{index .Labels "{LABEL}"}}}}')
    for line in out.splitlines() if code == 0 else ():
        ident, _, sandbox = line.partition(" ")
        if not Path(sandbox).exists():
            await runtime.call("rm", "--force", ident)
