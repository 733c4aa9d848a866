"""The devnet runs images: an allocation whose image is in Podman's local storage runs in a
container with the image's entrypoint, cmd, environment and working directory, the
allocation's own where it gives them, its volumes, and its resource limits.

The image is built here from the Debian base that ``make image`` bootstraps (no registry is
reached); without Podman, or without that base, these tests skip naming what is missing
(``make image-test`` installs and builds both, and CI runs it)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.devnet.pytest_plugin import EmbeddedDevnet, one_node_ensemble, shell_allocation

BASE = "localhost/dmsgw-base:bookworm"
BUILD_S = 300
HERE = Path(__file__).parent / "data" / "image"

pytestmark = [pytest.mark.image, pytest.mark.devnet_embedded]


def _missing() -> str:
    if os.geteuid() != 0:
        return "the devnet runs images with rootful Podman: run as root"
    if shutil.which("podman") is None:
        return "podman is not installed (make image-test installs it)"
    found = subprocess.run(["podman", "image", "exists", BASE], timeout=60, check=False)
    return "" if found.returncode == 0 else f"no {BASE} in Podman's storage (make image builds it)"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The test image, built from ``tests/data/image`` under a tag of this process's own."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    tag = f"localhost/dmsgw-devnet-test:{os.getpid()}"
    build = ["podman", "build", "--quiet", "--pull=never", "--isolation", "chroot", "-t", tag]
    subprocess.run([*build, str(HERE)], check=True, timeout=BUILD_S, capture_output=True)
    yield tag
    subprocess.run(["podman", "rmi", "--force", tag], timeout=BUILD_S, capture_output=True)


def _image_allocation(image: str, **execution: object) -> dict[str, object]:
    allocation = shell_allocation("task", "", image=image)
    allocation["execution"] = {"type": "docker", "params": {"image": image, **execution}}
    return allocation


def _run(devnet: EmbeddedDevnet, allocation: dict[str, object], status: str = "completed") -> str:
    ensemble = devnet.dms.deployment.new(one_node_ensemble({"job": allocation})).ensemble_id
    devnet.wait_allocation(ensemble, "n1.job", status)
    return devnet.stdout(ensemble, "n1.job")


def test_an_allocation_without_cmd_runs_the_images_entrypoint_and_cmd(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    out = _run(embedded_devnet, _image_allocation(image))
    first, version = out.splitlines()
    assert first == "hello-from-the-image from /srv as 0"
    assert version[:2].isdigit()  # /etc/debian_version of the image, not of the host


def test_the_allocations_cmd_env_and_workdir_replace_the_images(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    allocation = _image_allocation(
        image,
        cmd=["sh", "-c", "echo $EXTRA; ls /"],
        environment=["GREETING=from-the-allocation", "EXTRA=extra"],
        working_directory="/tmp",
    )
    out = _run(embedded_devnet, allocation).splitlines()
    assert out[:2] == ["from-the-allocation from /tmp as 0", "extra"]
    assert "srv" in out  # the image's root, not the host's


def test_an_entrypoint_clears_the_images_cmd_and_exit_codes_are_the_containers(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    allocation = _image_allocation(image, entrypoint=["sh", "-c", "echo own; exit 3"])
    ensemble = embedded_devnet.dms.deployment.new(
        one_node_ensemble({"job": allocation})
    ).ensemble_id
    embedded_devnet.wait_allocation(ensemble, "n1.job", "failed")
    assert embedded_devnet.stdout(ensemble, "n1.job") == "own\n"
    assert embedded_devnet.orchestrator(ensemble).placed["n1.job"].exit_code == 3


def test_volumes_are_bound_and_read_only_ones_cannot_be_written(
    embedded_devnet: EmbeddedDevnet, image: str, host_dir: Path
) -> None:
    (host_dir / "in").write_text("from the host\n")
    script = "cat /data/in; echo out > /data/out; echo x > /ro/x || echo refused"
    allocation = _image_allocation(image, cmd=["sh", "-c", script])
    allocation["volume"] = [
        {"type": "local", "src": str(host_dir), "mount_destination": "/data"},
        {"type": "local", "src": "scratch", "mount_destination": "/ro", "read_only": True},
    ]
    out = _run(embedded_devnet, allocation)
    assert out.splitlines() == ["hello-from-the-image from /srv as 0", "from the host", "refused"]
    assert (host_dir / "out").read_text() == "out\n"


def test_the_memory_limit_is_the_containers(embedded_devnet: EmbeddedDevnet, image: str) -> None:
    v1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    script = f"cat /sys/fs/cgroup/memory.max 2>/dev/null || cat {v1}"
    allocation = _image_allocation(image, cmd=["sh", "-c", script])
    allocation["resources"] = {**allocation["resources"], "ram": {"size": 64 << 20}}  # type: ignore[dict-item]
    assert _run(embedded_devnet, allocation).splitlines()[-1] == str(64 << 20)


def test_provision_scripts_run_in_the_container_before_its_command(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    allocation = _image_allocation(image, cmd=["cat", "/srv/made"])
    allocation["provision"] = ["make"]
    ensemble = one_node_ensemble({"job": allocation})
    ensemble["v1"]["scripts"] = {"make": base64.b64encode(b"echo made > /srv/made").decode()}
    ensemble_id = embedded_devnet.dms.deployment.new(ensemble).ensemble_id
    embedded_devnet.wait_allocation(ensemble_id, "n1.job", "completed")
    assert embedded_devnet.stdout(ensemble_id, "n1.job").splitlines()[-1] == "made"


def test_an_image_not_in_storage_without_cmd_is_refused_as_a_devnet_limit(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    allocation = _image_allocation("localhost/not-built-here:1")
    with pytest.raises(DMSBehaviorError) as info:
        embedded_devnet.dms.deployment.new(one_node_ensemble({"job": allocation}))
    message = str(info.value)
    assert "devnet limit, not a DMS rule" in message and "podman" in message
    assert "failed to validate ensemble configuration" not in message
