"""The devnet runs images: an allocation whose image is in Podman's local storage runs in a
container with the image's entrypoint, cmd, environment and working directory, the
allocation's own where it gives them, its volumes, and its resource limits.

The image is built here from the Debian base that ``make image`` bootstraps (no registry is
reached); without Podman, or without that base, these tests skip naming what is missing
(``make image-test`` installs and builds both, and CI runs it)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.cli import main
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.devnet.pytest_plugin import EmbeddedDevnet, one_node_ensemble, shell_allocation
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.server import Metrics, PluginServer
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context

BASE = "localhost/dmsgw-base:bookworm"
NS = 1_000_000_000
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
    built = subprocess.run([*build, str(HERE)], timeout=BUILD_S, capture_output=True, text=True)
    assert built.returncode == 0, f"podman build: {built.stderr}"
    yield tag
    subprocess.run(["podman", "rmi", "--force", tag], timeout=BUILD_S, capture_output=True)


def _image_allocation(image: str, **execution: object) -> dict[str, object]:
    allocation = shell_allocation("task", "", image=image)
    allocation["execution"] = {"type": "docker", "params": {"image": image, **execution}}
    return allocation


def _run(devnet: EmbeddedDevnet, allocation: dict[str, object], status: str = "completed") -> str:
    ensemble = devnet.dms.deployment.new(one_node_ensemble({"job": allocation})).ensemble_id
    try:
        devnet.wait_allocation(ensemble, "n1.job", status)
    except AssertionError as exc:
        failures = devnet.orchestrator(ensemble).failures
        raise AssertionError(f"{exc}; failed attempts: {failures}") from None
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


def _containers_of(devnet: EmbeddedDevnet) -> list[str]:
    """The names of the containers this devnet has in Podman (running or not)."""
    listed = subprocess.run(
        ["podman", "ps", "-a", "--filter", "label=dmsgw.devnet", "--format", "{{.Names}}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    root = devnet.devnet.root
    assert root is not None
    return [name for name in listed.stdout.split() if root.name in name]


def test_exec_health_checks_run_in_the_container(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    h = embedded_devnet
    check = {"type": "command", "interval": NS // 10}
    service = {"cmd": ["sleep", "60"]}
    fine = _image_allocation(image, **service)
    fine.update(type="service", healthcheck={**check, "exec": ["test", "-d", "/srv"]})
    sick = _image_allocation(image, **service)
    sick.update(type="service", healthcheck={**check, "exec": ["test", "-d", "/nowhere"]})
    eid = h.dms.deployment.new(one_node_ensemble({"fine": fine, "sick": sick})).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"

    def healthy() -> bool:
        info = h.dms.deployment.status(eid).allocation_info or {}
        return any(k.endswith(".fine") and i.health == "healthy" for k, i in info.items())

    h.wait_for(healthy, what="the service whose image has /srv to be healthy")
    ill = h.faults.allocation(eid, "sick")
    h.wait_for(lambda: len(ill.started_ns) >= 2, what="the unhealthy service to be restarted")


def test_a_killed_container_fails_with_137_and_shutdown_removes_the_containers(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    h = embedded_devnet
    svc = _image_allocation(image, cmd=["sleep", "60"])
    svc.update(type="service", failure_recovery="stay_down")
    peer = _image_allocation(image, cmd=["sleep", "60"])
    peer.update(type="service")
    eid = h.dms.deployment.new(one_node_ensemble({"svc": svc, "peer": peer})).ensemble_id
    assert h.wait_status(eid, "Running") == "Running"
    assert len(_containers_of(h)) == 2
    h.faults.kill_allocation(eid, "svc")
    h.wait_allocation(eid, "n1.svc", "failed")
    killed = h.faults.allocation(eid, "svc")
    assert (killed.exit_code, killed.oom_killed) == (137, False)  # the devnet's own SIGKILL
    h.dms.deployment.shutdown(eid)
    assert h.wait_status(eid, "Completed") == "Completed"
    h.wait_for(lambda: not _containers_of(h), what="the containers to be removed")


ENSEMBLE = """\
version: "V1"
allocations:
  alloc1:
    type: task
    executor: docker
    resources: {cpu: {cores: 0.5}, ram: {size: 0.25}, disk: {size: 0.25}}
    execution: {type: docker, image: %s}
nodes:
  node1:
    allocations: [alloc1]
"""


def test_dmsgw_deploy_runs_an_image_without_cmd(
    image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The repository's hello.yaml shape (an image and no ``cmd``), deployed and waited for
    with the CLI: it completes, and ``dmsgw logs`` prints what the image's entrypoint wrote."""
    key = Ed25519PrivKey(bytes(range(90, 122)))
    monkeypatch.setenv("DMS_PASSPHRASE", "pw")
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    background = BackgroundDevnet(Devnet(1, seed="image-cli-tests", early_timeout=True))
    devnet = background.start()
    try:
        keys, caps = tmp_path / "key", tmp_path / "cap"
        KeyStore(keys).save("gw", marshal_private_key(key), "pw")
        grant = devnet.grant(DID.from_public_key(key.public_key()), ["/dms/node", "/public"])
        caps.mkdir()
        context = CapabilityContext(provider_from_private_key(key), name="gw", provide=grant)
        save_context(context, directory=caps)
        setup = ["--url", devnet.urls[0], "--key", "gw", "--key-dir", str(keys)]
        setup += ["--cap-dir", str(caps)]
        path = tmp_path / "hello.yaml"
        path.write_text(ENSEMBLE % image)
        assert main(["deploy", str(path), "--wait", *setup]) == 0, capsys.readouterr().err
        ensemble = capsys.readouterr().out.splitlines()[0].rsplit(" ", 1)[-1]
        assert main(["logs", ensemble, "node1.alloc1", *setup]) == 0
        assert capsys.readouterr().out.startswith("hello-from-the-image from /srv as 0\n")
    finally:
        background.stop()


async def test_a_pod_without_command_runs_its_image_through_the_plugin_api(
    image: str, tmp_path: Path
) -> None:
    """A pod whose container names only its image, as interLink hands it over: the gateway
    deploys it without ``cmd`` and the devnet runs the image's entrypoint and ``cmd``."""
    uid = "5a0c3e2d-9b8a-4c7d-8e6f-1a2b3c4d5e6f"
    spec = {
        "metadata": {"name": "from-an-image", "namespace": "default", "uid": uid},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]},
    }
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "state.sqlite3")}
    )
    metrics = Metrics()
    backend = await start_backend(config, metrics=metrics)
    server = PluginServer(backend, config.server_options(), metrics)
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"),
        headers={"Content-Type": "application/json"},
    )
    await client.start_server()
    try:
        body = json.dumps({"pod": spec, "container": [{"name": "main"}]})
        assert (await client.post("/create", data=body)).status == 200
        state: dict[str, object] = {}
        for _ in range(600):  # interLink's /status polls, each answered as the pod stands
            (status,) = await (await client.get("/status", data=json.dumps([spec]))).json()
            state = status["containers"][0]["state"]
            if "terminated" in state:
                break
            await asyncio.sleep(0.05)
        assert state.get("terminated", {}).get("exitCode") == 0, state  # type: ignore[union-attr]
        logs = {"Namespace": "default", "PodUID": uid, "PodName": "from-an-image"}
        logs |= {"ContainerName": "main", "Opts": {}}
        text = await (await client.get("/getLogs", data=json.dumps(logs))).text()
        assert text.startswith("hello-from-the-image from /srv as 0\n"), text
        assert (await client.post("/delete", data=json.dumps(spec))).status == 200
    finally:
        await client.close()
        await backend.close()


APPLIANCE = Path(__file__).parent / "data" / "ensembles" / "appliance"


@pytest.mark.parametrize("shipped", ["hello_world", "task_with_contract"])
def test_the_appliance_ensembles_that_need_no_network_run_their_images(
    embedded_devnet: EmbeddedDevnet, image: str, tmp_path: Path, shipped: str
) -> None:
    """NuNet's appliance ensembles that need nothing from the network, as shipped (no
    ``cmd``: the image's entrypoint runs), with the locally built image standing in for
    ``hello-world``, which no registry here can give; a pinned ``peer`` names a machine of
    the appliance's, so it is dropped."""
    text = (
        (APPLIANCE / f"{shipped}.yaml").read_text().replace("image: hello-world", f"image: {image}")
    )
    path = tmp_path / f"{shipped}.yaml"
    path.write_text("".join(line for line in text.splitlines(True) if "peer:" not in line))
    eid = embedded_devnet.dms.deployment.new(str(path)).ensemble_id
    failures = embedded_devnet.orchestrator(eid).failures
    assert embedded_devnet.wait_status(eid, "Completed", "Failed") == "Completed", failures
    assert embedded_devnet.stdout(eid, "node1.alloc1").startswith("hello-from-the-image from /srv")


def test_a_container_cannot_bind_what_the_pods_user_could_not_reach(
    embedded_devnet: EmbeddedDevnet, image: str, tmp_path: Path, host_dir: Path
) -> None:
    """The container's user may be root: a host directory is bound only if the pod's own
    user could use it so (pytest's ``tmp_path`` is root's alone), else the start fails
    naming it; a named volume is the pod's user's and group's, and the container has that
    group."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (host_dir / "ro").mkdir(mode=0o755)
    h = embedded_devnet
    root_only = _image_allocation(image, cmd=["ls", "/s"])
    root_only["volume"] = [{"type": "local", "src": str(secret), "mount_destination": "/s"}]
    eid = h.dms.deployment.new(one_node_ensemble({"job": root_only})).ensemble_id
    assert h.wait_status(eid, "Failed", "Completed") == "Failed"
    assert any(
        "volume /s: the pod's user" in why and "cannot enter" in why
        for why in h.orchestrator(eid).failures
    ), h.orchestrator(eid).failures
    readable = _image_allocation(image, cmd=["sh", "-c", "id -G; stat -c '%a %u' /v"])
    readable["volume"] = [
        {
            "type": "local",
            "src": str(host_dir / "ro"),
            "mount_destination": "/r",
            "read_only": True,
        },
        {"type": "local", "src": "mine", "mount_destination": "/v"},
    ]
    eid = h.dms.deployment.new(one_node_ensemble({"job": readable})).ensemble_id
    h.wait_allocation(eid, "n1.job", "completed")
    groups, volume = h.stdout(eid, "n1.job").splitlines()[-2:]
    run_as = h.faults.allocation(eid, "job").plan.run_as  # type: ignore[union-attr]
    assert run_as is not None and str(run_as.gid) in groups.split()
    assert volume == f"2770 {run_as.uid}"


def test_a_command_the_image_lacks_fails_the_start_with_podmans_reason(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    h = embedded_devnet
    allocation = _image_allocation(image, entrypoint=["/no/such/program"])
    eid = h.dms.deployment.new(one_node_ensemble({"job": allocation})).ensemble_id
    assert h.wait_status(eid, "Failed", "Completed") == "Failed"
    failures = h.orchestrator(eid).failures
    assert any("podman start: " in why and "/no/such/program" in why for why in failures), failures
    assert not _containers_of(h)


SERVER = (
    "use IO::Socket::INET; $| = 1;"
    "my $s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die $!;"
    'print "listening\\n";'
    'while (my $c = $s->accept) { print $c "hello from $ENV{GREETING}\\n"; close $c }'
)


def test_a_containers_private_port_is_reached_through_its_public_port(
    embedded_devnet: EmbeddedDevnet, image: str, unused_tcp_port: int
) -> None:
    """The container joins the allocation's network: what it serves on its private port is
    forwarded from the public port its node publishes, as for a host process."""
    h = embedded_devnet
    svc = _image_allocation(image, entrypoint=["perl", "-e", SERVER])
    svc.update(type="service")
    ports = [{"public": unused_tcp_port, "private": 8080, "allocation": "svc"}]
    eid = h.dms.deployment.new(one_node_ensemble({"svc": svc}, ports=ports)).ensemble_id
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    h.wait_for(lambda: h.stdout(eid, "n1.svc") == "listening\n", what="the server to listen")
    with socket.create_connection(("127.0.0.1", unused_tcp_port), timeout=30) as conn:
        assert conn.makefile().readline() == "hello from hello-from-the-image\n"


def test_a_container_over_its_memory_is_oom_killed_as_docker_reports_it(
    embedded_devnet: EmbeddedDevnet, image: str
) -> None:
    h = embedded_devnet
    hog = _image_allocation(image, cmd=["perl", "-e", '$x = "x" x (256 << 20); sleep 30'])
    hog["resources"] = {**hog["resources"], "ram": {"size": 64 << 20}}  # type: ignore[dict-item]
    eid = h.dms.deployment.new(one_node_ensemble({"job": hog})).ensemble_id
    h.wait_allocation(eid, "n1.job", "failed")
    allocation = h.faults.allocation(eid, "job")
    assert (allocation.exit_code, allocation.oom_killed) == (137, True)
    assert allocation.error == "container was killed due to OOM"
