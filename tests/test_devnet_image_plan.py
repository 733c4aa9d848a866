"""How the devnet composes a container for an allocation whose image it can run, and what it
says when it cannot: Podman's arguments, as the DMS's docker executor would configure the
container (no Podman needed here; ``test_devnet_images.py`` runs them)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from dmsgw.behaviors.ensemble import SpecConfig, VolumeConfig
from dmsgw.behaviors.resources import CPU, RAM, Resources
from dmsgw.devnet.images import (
    ImageConfig,
    Images,
    OciRuntime,
    create_arguments,
    effective_command,
    why_not_runnable,
)
from dmsgw.devnet.protocol import AllocationDeploymentConfig
from dmsgw.devnet.sandbox import (
    Isolation,
    SandboxError,
    SandboxPlan,
    missing_host_paths,
    plan_sandbox,
)

RUNTIME = OciRuntime("/usr/bin/podman", run_options=("--ulimit", "nofile=1024:1024"))
IMAGE = ImageConfig(entrypoint=("/init",), cmd=("serve", "--port", "80"), working_dir="/app")


def _plan(tmp_path: Path, params: dict[str, object], **fields: object) -> SandboxPlan:
    config = AllocationDeploymentConfig(
        execution=SpecConfig(type="docker", params={"image": "app:1", **params}),
        **fields,  # type: ignore[arg-type]
    )
    root = tmp_path / "dmsgw-devnet-1" / "node0" / "allocations" / "e_n1.job"
    return plan_sandbox(
        root, config, Isolation.REWRITE, volumes=tmp_path / "volumes", image="app:1"
    )


def _after_image(arguments: list[str]) -> list[str]:
    return arguments[arguments.index("app:1") + 1 :]


def test_without_entrypoint_or_cmd_the_image_runs_its_own(tmp_path: Path) -> None:
    arguments = create_arguments(RUNTIME, _plan(tmp_path, {}), IMAGE, None)
    assert _after_image(arguments) == []
    assert "--entrypoint" not in arguments and "--workdir" not in arguments
    assert arguments[:3] == ["create", "--name", "dmsgw-dmsgw-devnet-1-node0-e_n1.job"]
    assert arguments[5:7] == ["--network", "host"]
    assert arguments[9:11] == ["--pull", "never"] and "--ulimit" in arguments


def test_a_cmd_replaces_the_images_and_keeps_its_entrypoint(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"cmd": ["echo", "hi"]})
    assert _after_image(create_arguments(RUNTIME, plan, IMAGE, None)) == ["echo", "hi"]
    assert effective_command(plan, IMAGE) == ("/init", "echo", "hi")


def test_an_entrypoint_clears_the_images_cmd_as_docker_does(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"entrypoint": ["sh", "-c"], "cmd": ["exit 3"]})
    arguments = create_arguments(RUNTIME, plan, IMAGE, None)
    assert arguments[arguments.index("--entrypoint") + 1] == '["sh", "-c"]'
    assert _after_image(arguments) == ["exit 3"]
    alone = _plan(tmp_path, {"entrypoint": ["/bin/true"]})
    assert effective_command(alone, IMAGE) == ("/bin/true",)


def test_env_workdir_volumes_and_limits_are_the_allocations(tmp_path: Path) -> None:
    host = tmp_path / "host"
    plan = _plan(
        tmp_path,
        {"environment": ["A=1", "PATH=/mine"], "working_directory": "/work"},
        volume=(
            VolumeConfig(type="local", src=str(host), mount_destination="/data", read_only=True),
            VolumeConfig(type="local", src="shared", mount_destination="/shared"),
        ),
        resources=Resources(cpu=CPU(cores=1.5), ram=RAM(size=64 << 20)),
    )
    arguments = create_arguments(RUNTIME, plan, IMAGE, Path("/run/netns/x"))
    pairs = list(itertools.pairwise(arguments))
    assert ("--env", "A=1") in pairs and ("--env", "PATH=/mine") in pairs
    assert ("--env", f"HOME={plan.root / 'work'}") not in pairs  # the image's own HOME
    assert ("--workdir", "/work") in pairs
    assert ("--volume", f"{host}:/data:ro") in pairs
    assert ("--volume", f"{tmp_path / 'volumes' / 'shared'}:/shared:rw") in pairs
    assert ("--memory", str(64 << 20)) in pairs and ("--memory-swap", str(64 << 20)) in pairs
    assert ("--cpus", "1.5") in pairs and ("--network", "ns:/run/netns/x") in pairs


def test_provision_scripts_run_in_the_container_before_the_images_command(
    tmp_path: Path,
) -> None:
    plan = _plan(tmp_path, {}, provision_scripts={"b": b"echo b", "a": b"echo a"})
    arguments = create_arguments(RUNTIME, plan, IMAGE, None)
    wrapper = json.loads(arguments[arguments.index("--entrypoint") + 1])
    assert wrapper[:2] == ["/bin/sh", "-c"] and wrapper[3] == "dmsgw-allocation"
    lines = wrapper[2].splitlines()
    assert lines[0].startswith("/bin/sh /.dmsgw/scripts/0-a || ")
    assert lines[1].startswith("/bin/sh /.dmsgw/scripts/1-b || ")
    assert lines[-2:] == ["echo started > /.dmsgw/status.fifo", 'exec "$@"']
    assert _after_image(arguments) == ["/init", "serve", "--port", "80"]


def test_an_image_with_nothing_to_run_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="image 'app:1' has no entrypoint or cmd"):
        effective_command(_plan(tmp_path, {}), ImageConfig())


def test_the_devnet_limit_says_how_to_lift_it() -> None:
    without = why_not_runnable("hello-world", runtime_missing=True)
    assert without.startswith("devnet limit, not a DMS rule: image 'hello-world'")
    assert "as root with Podman installed" in without and "give execution.cmd" in without
    missing = why_not_runnable("hello-world", runtime_missing=False)
    assert "podman build/load/pull hello-world" in missing


def test_a_missing_host_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    volumes = [
        VolumeConfig(type="local", src=str(tmp_path / "gone"), mount_destination="/a"),
        VolumeConfig(type="local", src=str(tmp_path / "file"), mount_destination="/b"),
        VolumeConfig(type="local", src=str(tmp_path), mount_destination="/c"),
        VolumeConfig(type="local", src="named", mount_destination="/d"),
    ]
    assert missing_host_paths(volumes) == [
        f"volume[0].src '{tmp_path / 'gone'}': bind source path does not exist on the host",
        f"volume[1].src '{tmp_path / 'file'}': bind source path is not a directory on the host",
    ]


async def test_images_switched_off_run_nothing_in_containers() -> None:
    images = Images(enabled=False)
    assert await images.config("anything") is None
    assert images.describe() == "images not run (host commands only)"
