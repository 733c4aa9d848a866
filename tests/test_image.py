"""The OCI image (``make image``): ``dmsgw serve`` runs from it as its unprivileged user, with
its state and socket on mounted volumes, and a pod goes through its plugin API from create
to logs and delete, as interLink would drive it.

Opt-in (it needs the image, minutes to build): ``make image-test`` builds it and runs this
with ``DMSGW_IMAGE``; CI runs it as a job of its own. The image runs under Podman's OCI
runtime where the machine lets one start containers; where it cannot (a sandbox that refuses
the runtime's cgroup or rlimit set-up, as the machine this project is built on does), under
buildah's chroot isolation: the same image, its filesystem, user and environment, without
the runtime's namespaces."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

IMAGE = os.environ.get("DMSGW_IMAGE", "")
TIMEOUT_S = 120
UID = "6f1d2c3b-0a9e-4d8c-b7a6-5e4f3d2c1b0a"
POD = {
    "metadata": {"name": "from-the-image", "namespace": "default", "uid": UID},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {"name": "main", "image": "busybox", "command": ["sh", "-c"],
             "args": ["echo hello from the image"]}
        ],
    },
}  # fmt: skip

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not IMAGE, reason="set DMSGW_IMAGE (make image-test builds and runs it)"),
]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        self.sock.connect(str(self._path))


def _call(path: Path, method: str, route: str, body: Any) -> tuple[int, str]:
    connection = _UnixConnection(path)
    try:
        connection.request(
            method, route, json.dumps(body), headers={"Content-Type": "application/json"}
        )
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def _until(check: Any, what: str) -> Any:
    """``check()`` until it gives something true, within the test's bound."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (found := check()):
        assert time.monotonic() < deadline, f"never within {TIMEOUT_S} s: {what}"
        time.sleep(0.2)
    return found


def _podman_runs_containers() -> bool:
    done = subprocess.run(
        ["podman", "run", "--rm", IMAGE, "--version"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.returncode == 0


@pytest.fixture
def sockets() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dmsgw-image-"))
    path.chmod(0o777)  # the image's user (10001) makes its socket here
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def served(sockets: Path) -> Iterator[Path]:
    """`dmsgw serve --devnet` from the image, its plugin API on a socket in ``sockets``."""
    serve = ["serve", "--devnet", "--listen", "unix:///run/dmsgw/plugin.sock"]
    serve += ["--operator-listen", "127.0.0.1:0", "--log-format", "text"]
    if _podman_runs_containers():
        command = ["podman", "run", "--rm", "--network", "host"]
        command += ["-v", f"{sockets}:/run/dmsgw", IMAGE, *serve]
        container = None
    else:
        made = subprocess.run(
            ["buildah", "from", "--pull-never", IMAGE],
            capture_output=True,
            text=True,
            check=True,
            timeout=TIMEOUT_S,
        )
        container = made.stdout.strip()
        command = ["buildah", "run", "--isolation", "chroot", "--network", "host"]
        command += ["-v", f"{sockets}:/run/dmsgw", container, "--", "dmsgw", *serve]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    socket_path = sockets / "plugin.sock"
    try:
        _until(lambda: socket_path.exists() or process.poll() is not None, "the plugin socket")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield socket_path
    finally:
        process.terminate()
        process.wait(TIMEOUT_S)
        if container is not None:
            subprocess.run(["buildah", "rm", container], capture_output=True, timeout=TIMEOUT_S)


def test_the_image_runs_as_its_own_user_with_volumes() -> None:
    shown = subprocess.run(
        ["podman", "image", "inspect", IMAGE], capture_output=True, text=True, check=True
    )
    config = json.loads(shown.stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["dmsgw"]
    assert set(config["Volumes"]) == {"/var/lib/dmsgw", "/run/dmsgw"}


def test_a_pod_goes_through_the_plugin_api_of_the_image(served: Path) -> None:
    assert served.stat().st_uid == 10001  # made by the image's user, not root
    status, text = _call(served, "POST", "/create", {"pod": POD, "container": [{"name": "main"}]})
    assert status == 200, text
    assert json.loads(text)["PodUID"] == UID

    def ended() -> dict[str, Any] | None:
        status, text = _call(served, "GET", "/status", [POD])
        assert status == 200, text
        (pod,) = json.loads(text)
        state = pod["containers"][0]["state"]
        return state.get("terminated")

    terminated = _until(ended, "the pod's end")
    assert terminated["exitCode"] == 0
    logs = {"Namespace": "default", "PodUID": UID, "PodName": "from-the-image"}
    status, text = _call(served, "GET", "/getLogs", {**logs, "ContainerName": "main", "Opts": {}})
    assert (status, text.strip()) == (200, "hello from the image")
    status, text = _call(served, "POST", "/delete", POD)
    assert status == 200, text
