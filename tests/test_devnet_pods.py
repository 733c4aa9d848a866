"""Kubernetes pods on the devnet: ensembles made by ``interlink.translate.pod_to_ensemble``,
deployed through the gateway's client, reach the states a kubelet would give them.

Every pod mounts its volumes under a fresh ``/dmsgw-test-<random>`` directory, which must not
exist on the host once the pod has run: the devnet keeps everything under its own work
directory. The pods run in both isolation modes (mount namespaces only where this process can
make them); the devnet's objects are read for what a DMS reply does not carry (exit codes).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dmsgw.devnet.executor import probe_isolation
from dmsgw.devnet.pytest_plugin import EmbeddedDevnet, start_embedded
from dmsgw.devnet.sandbox import Isolation
from dmsgw.interlink.translate import POD_NODE, pod_to_ensemble
from dmsgw.interlink.translate.run_markers import strip_marker
from dmsgw.interlink.wire.bodies import RetrievedPodData

ISOLATIONS = sorted({Isolation.REWRITE, asyncio.run(probe_isolation())})
TOKEN = base64.b64encode(b"s3cr3t\n").decode()


@pytest.fixture(scope="module", params=ISOLATIONS)
def devnet(request: pytest.FixtureRequest) -> Iterator[EmbeddedDevnet]:
    """One embedded devnet per isolation mode for the module's pods."""
    handle = start_embedded(seed=f"pods-{request.param}", isolation=request.param)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the pod mounts its volumes under; it must never reach the host."""
    path = Path(f"/dmsgw-test-{secrets.token_hex(4)}")
    yield path
    assert not path.exists(), f"{path} was written on the host"


def _isolation(h: EmbeddedDevnet) -> Isolation:
    executor = h.devnet.nodes[0].executor
    assert executor is not None
    return executor.isolation


def _container(name: str, script: str, *mounts: tuple[str, Path], **fields: Any) -> Any:
    return {
        "name": name,
        "image": "busybox:1.36",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": v, "mountPath": str(p)} for v, p in mounts],
        **fields,
    }


def _deploy(
    h: EmbeddedDevnet,
    containers: Sequence[Any],
    *,
    init: Sequence[Any] = (),
    volumes: Sequence[Any] = (),
    config_maps: Sequence[Any] = (),
    secrets_: Sequence[Any] = (),
    grace_s: int | None = None,
) -> str:
    """Translate the pod as the gateway does and deploy it; the ensemble ID."""
    uid = f"0b8c6f6e-3d4a-4f0e-9c1e-{secrets.token_hex(6)}"
    pod = {
        "metadata": {"name": "demo", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": "Never",
            "initContainers": list(init),
            "containers": list(containers),
            "volumes": list(volumes),
            **({} if grace_s is None else {"terminationGracePeriodSeconds": grace_s}),
        },
    }
    sent = {
        "name": containers[0]["name"],
        "configMaps": list(config_maps),
        "secrets": list(secrets_),
    }
    ensemble = pod_to_ensemble(RetrievedPodData.model_validate({"pod": pod, "container": [sent]}))
    reply = h.dms.deployment.new(ensemble)
    assert reply.status == "OK", reply
    return str(reply.ensemble_id)


def _stdout(h: EmbeddedDevnet, eid: str, container: str) -> str:
    """The container's output, as ``/getLogs`` serves it (the wrapper's markers left out)."""
    raw = h.stdout(eid, f"{POD_NODE}.{container}").encode()
    return b"".join(strip_marker(line) for line in raw.splitlines(keepends=True)).decode()


def _statuses(h: EmbeddedDevnet, eid: str) -> dict[str, str]:
    manifest = h.dms.deployment.manifest(eid).manifest
    return {k: a.status for k, a in (manifest.allocations or {}).items()}


def _volume_dirs(h: EmbeddedDevnet) -> list[Path]:
    assert h.devnet.root is not None
    return sorted(h.devnet.root.glob("*/volumes/*"))


def test_the_containers_of_a_pod_share_an_empty_dir(devnet: EmbeddedDevnet, base: Path) -> None:
    h = devnet
    shared = base / "shared"
    eid = _deploy(
        h,
        [
            _container("writer", f"echo hello from writer > {shared}/msg", ("scratch", shared)),
            _container(
                "reader",
                f"until [ -e {shared}/msg ]; do sleep 0.05; done; cat {shared}/msg",
                ("scratch", shared),
            ),
        ],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    assert _statuses(h, eid) == {"pod.reader": "completed", "pod.writer": "completed"}
    assert _stdout(h, eid, "reader") == "hello from writer\n"
    assert _volume_dirs(h) == []  # gone with the pod


def test_config_map_and_secret_files_keep_their_modes_and_are_read_only(
    devnet: EmbeddedDevnet, base: Path
) -> None:
    h = devnet
    cfg, sec = base / "cfg", base / "sec"
    script = (
        f"stat -c '%a %n' {cfg}/app.conf {cfg}/extra/log.conf {sec}/token; "
        f"cat {cfg}/app.conf {sec}/token; "
        f"if touch {cfg}/new 2>/dev/null || echo x >> {sec}/token; "
        "then echo writable; else echo read-only; fi"
    )
    eid = _deploy(
        h,
        [_container("main", script, ("cfg", cfg), ("sec", sec))],
        volumes=[
            {
                "name": "cfg",
                "configMap": {
                    "name": "app",
                    "items": [
                        {"key": "app.conf", "path": "app.conf"},
                        {"key": "log.conf", "path": "extra/log.conf", "mode": 0o640},
                    ],
                },
            },
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        ],
        config_maps=[
            {"metadata": {"name": "app"}, "data": {"app.conf": "x=1\n", "log.conf": "level=info"}}
        ],
        secrets_=[{"metadata": {"name": "creds"}, "data": {"token": TOKEN}}],
    )
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    assert _statuses(h, eid) == {"pod.main": "completed"}
    lines = _stdout(h, eid, "main").splitlines()
    modes = {name.rsplit("/", 1)[1]: int(mode, 8) for mode, name in map(str.split, lines[:3])}
    assert lines[3:5] == ["x=1", "s3cr3t"]
    wanted = {"app.conf": 0o644, "log.conf": 0o640, "token": 0o400}
    if _isolation(h) is Isolation.NAMESPACE:  # bind-remounted read-only, modes untouched
        assert (modes, lines[5]) == (wanted, "read-only")
    else:  # write permission taken away, which binds the allocation's user (never root)
        assert modes == {name: mode & ~0o222 for name, mode in wanted.items()}
        assert lines[5] == "read-only"


def test_init_containers_run_to_completion_in_order_first(
    devnet: EmbeddedDevnet, base: Path
) -> None:
    h = devnet
    work = base / "work"
    eid = _deploy(
        h,
        [_container("main", f"echo main >> {work}/order; cat {work}/order", ("work", work))],
        init=[
            _container("first", f"sleep 0.2; echo first >> {work}/order", ("work", work)),
            _container("second", f"echo second >> {work}/order", ("work", work)),
        ],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    assert h.wait_status(eid, "Completed", "Failed") == "Completed"
    assert _stdout(h, eid, "main") == "first\nsecond\nmain\n"
    assert _statuses(h, eid) == {
        "pod.first": "completed",
        "pod.second": "completed",
        "pod.main": "completed",
    }
    starts = {n: h.faults.allocation(eid, n).started_ns[0] for n in ("first", "second", "main")}
    assert starts["first"] < starts["second"] < starts["main"]


def test_a_failing_container_reports_its_exit_code(devnet: EmbeddedDevnet, base: Path) -> None:
    """The container's status shows in ``deployment/status``'s allocation info; its exit code
    is the orchestrator's (the DMS's ``AllocationInfo`` has no field for it)."""
    h = devnet
    eid = _deploy(
        h,
        [
            _container("bad", "echo oops >&2; exit 3"),
            _container("steady", "exec sleep 30"),
        ],
    )
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    h.wait_allocation(eid, "pod.bad", "failed")

    def info() -> dict[str, str]:
        reply = h.dms.deployment.status(eid)
        return {k.rsplit(".", 1)[1]: a.status for k, a in (reply.allocation_info or {}).items()}

    assert h.wait_for(lambda: info() == {"bad": "failed", "steady": "running"}, what="the info")
    assert h.orchestrator(eid).placed["pod.bad"].exit_code == 3
    assert h.faults.allocation(eid, "bad").exit_code == 3
    assert h.dms.deployment.shutdown(eid).ok
    assert h.wait_status(eid, "Completed") == "Completed"


def test_shutdown_runs_the_pre_stop_hook_before_the_container_stops(
    devnet: EmbeddedDevnet,
) -> None:
    """The devnet signals only the main process — the translator's wrapper — which runs
    ``preStop`` and then forwards SIGTERM to the container's command."""
    h = devnet
    script = "trap 'echo main-term; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    hook = {"preStop": {"exec": {"command": ["sh", "-c", "echo pre-stop"]}}}
    eid = _deploy(h, [_container("main", script, lifecycle=hook)])
    assert _shut_down_once_up(h, eid) == "up\npre-stop\nmain-term\n"
    assert h.faults.allocation(eid, "main").exit_code == 0


def test_shutdown_waits_out_the_pods_grace_period_before_it_kills(
    devnet: EmbeddedDevnet,
) -> None:
    """A container that flushes for longer than the devnet's own stop timeout (``shutdown_s``,
    2 s in tests; the DMS's ``AllocationShutdownTimeout``) but within the pod's
    ``terminationGracePeriodSeconds`` ends by itself: it was SIGKILLed at ``shutdown_s``."""
    h = devnet
    assert h.devnet.timeouts.shutdown_s < 3
    script = "trap 'sleep 3; echo flushed; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    eid = _deploy(h, [_container("main", script)], grace_s=20)
    assert _shut_down_once_up(h, eid) == "up\nflushed\n"
    assert h.faults.allocation(eid, "main").exit_code == 0


def _shut_down_once_up(h: EmbeddedDevnet, eid: str) -> str:
    """Once container ``main`` has written ``up``, shut it down as a deployment's shutdown
    does; its stdout once it has ended."""
    assert h.wait_status(eid, "Running", "Failed") == "Running"
    h.wait_for(lambda: _stdout(h, eid, "main") == "up\n", what="the container to be up")
    main = h.faults.allocation(eid, "main")
    h.background.call(main.shutdown())  # what a deployment's shutdown does to each allocation
    assert main.plan is not None  # read on disk: a deployment's shutdown would remove it
    raw = main.plan.stdout.read_bytes()
    return b"".join(strip_marker(line) for line in raw.splitlines(keepends=True)).decode()


def test_a_failed_init_container_fails_the_deployment_instead_of_leaving_it_provisioning() -> None:
    """The set-ups waiting for an init container give up once one has failed, so the DMS
    fails the deployment (after its own retries) instead of provisioning until its timeout."""
    from dmsgw.devnet.timeouts import TEST_TIMEOUTS

    patient = dataclasses.replace(TEST_TIMEOUTS, deploy_deadline_s=2.0, provision_s=3600.0)
    h = start_embedded(1, seed="pods-init-fails", timeouts=patient)
    try:
        eid = _deploy(
            h,
            [_container("main", "echo main")],
            init=[_container("setup", "echo broken >&2; exit 2")],
        )
        assert h.wait_status(eid, "Failed", "Running", "Completed", timeout_s=60) == "Failed"
    finally:
        h.close()
