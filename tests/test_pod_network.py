"""interLink's networking annotations on their own: the tunnel's commands and the pre-exec script
run by the pod wrapper (``sh`` on tiny commands), the tunnel's end stopping the container and
showing in its status, ``POD_IP``, and every annotation that cannot run refused at ``/create``
naming it. The tunnel end to end over the embedded devnet is in ``test_gateway_tunnel.py``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.translate import PodTranslationError, pod_to_ensemble
from dmsgw.interlink.translate.pod_network import (
    MAX_SCRIPT_BYTES,
    POD_IP_ANNOTATION,
    PRE_EXEC_ANNOTATION,
    TUNNEL_ANNOTATION,
    PodNetwork,
)
from dmsgw.interlink.translate.run_markers import markers, probe_markers, strip_marker
from tests.support.fake_dms_plugin import fake_dms_plugin
from tests.support.gateway_fakes import FakeDMS, pod, uid
from tests.support.pod_bodies import container, data, make_pod, needs_sh
from tests.support.wrapper_runs import run_wrapper

TUNNEL = f"metadata.annotations[{json.dumps(TUNNEL_ANNOTATION)}]"
PRE_EXEC = f"metadata.annotations[{json.dumps(PRE_EXEC_ANNOTATION)}]"
MESH_SCRIPT = "cat <<'EOFMESH' > $TMPDIR/mesh.sh\n#!/bin/bash\nset -e\nEOFMESH\n"
"""How interLink's full-mesh mode starts the pre-exec script (``templates/mesh.sh``)."""


def _run(tmp_path: Path, command: str, network: PodNetwork) -> subprocess.CompletedProcess[bytes]:
    """Run container ``main``'s wrapper around ``sh -c command``, with a grace a loaded
    machine honours: a kill after it (137) would say the stop did not reach the command."""
    spec = {"name": "main", "image": "x", "command": ["x"]}
    done: subprocess.CompletedProcess[bytes] = run_wrapper(
        tmp_path, spec, command, network=network, grace_s=5
    )
    return done


def _tunnel(commands: str) -> PodNetwork:
    return PodNetwork(tunnel=commands, tunnel_container="main")


def _wait_for(path: Path) -> str:
    """A shell loop that waits (at most 20 s) for ``path``."""
    there = shlex.quote(str(path))
    return f"i=0; while [ ! -e {there} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done"


@needs_sh
def test_the_tunnel_runs_beside_the_command_and_goes_with_it(tmp_path: Path) -> None:
    """The tunnel starts before the command, in a directory of its own, and runs while it does;
    when the command ends the tunnel is stopped, which is no failure: the exit status stays
    the command's."""
    up = tmp_path / "tunnel-up"
    done = _run(
        tmp_path,
        f"{_wait_for(up)}; [ -e {up} ] && exit 3",
        _tunnel(f"pwd > {up}.dir; touch {up}; exec sleep 30"),
    )
    assert done.returncode == 3, done.stderr
    own = Path((tmp_path / "tunnel-up.dir").read_text().strip())
    assert own != tmp_path and not own.exists()  # a directory of its own, removed after
    assert done.stderr.decode().splitlines() == ["dmsgw.io/started", "dmsgw.io/exit-code=3"]


@needs_sh
@pytest.mark.parametrize(
    ("commands", "status"),
    [
        ("echo cannot reach the server >&2; exit 7", 7),
        ("sh -c 'exit 5' &", 5),  # interLink's default line ends with '&'
        ("true", 0),
    ],
)
def test_a_tunnel_that_ends_stops_the_container_and_says_why(
    tmp_path: Path, commands: str, status: int
) -> None:
    done = _run(tmp_path, "exec sleep 30", _tunnel(commands))
    assert done.returncode == 143  # TERMed, as the kubelet stops a container
    why = f"{TUNNEL_ANNOTATION} ended with status {status}; its output is in the container's log"
    lines = [line for line in done.stderr.decode().splitlines() if line.startswith("dmsgw")]
    assert lines == [
        "dmsgw.io/started",
        f"dmsgw: the tunnel ended with status {status}; stopping the container",
        f"dmsgw.io/probe=tunnel:failing:{why}",
        "dmsgw.io/probe=tunnel:down",
        "dmsgw.io/exit-code=143",
    ], done.stderr
    runs = (
        Runs().read(markers(done.stderr), len(done.stderr)).read_probes(probe_markers(done.stderr))
    )
    seen = runs.observation()
    assert (seen.exit_code, seen.message) == (
        143,
        f"killed by the gateway: its tunnel failed: {why}",
    )
    shown = b"".join(strip_marker(line) for line in done.stderr.splitlines(keepends=True))
    assert b"tunnel:down" not in shown and b"the tunnel ended" in shown


@needs_sh
def test_the_pre_exec_script_runs_in_the_wrappers_shell_before_the_command(
    tmp_path: Path,
) -> None:
    """What it exports (``PATH`` included) reaches the command; a failure is told and the
    command runs all the same, as after interLink's plugins' pre-exec."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "greet").write_text('#!/bin/sh\necho "$GREETING from greet"\n')
    (bin_dir / "greet").chmod(0o755)
    network = PodNetwork(pre_exec=f"export GREETING=hi\nPATH={bin_dir}:$PATH\nfalse")
    done = _run(tmp_path, "greet", network)
    assert done.returncode == 0, done.stderr
    assert b"hi from greet\n" in done.stdout
    assert f"dmsgw: the pre-exec script ({PRE_EXEC_ANNOTATION}) failed with status 1".encode() in (
        done.stderr
    )


def _annotated(annotations: dict[str, str], *containers: dict[str, Any]) -> dict[str, Any]:
    spec = make_pod(*containers)
    spec["metadata"]["annotations"] = annotations
    return spec


def _params(spec: dict[str, Any], name: str = "main") -> dict[str, Any]:
    config = pod_to_ensemble(data(spec))
    assert config.v1 is not None and config.v1.allocations is not None
    params: dict[str, Any] = config.v1.allocations[name].execution.params
    return params


def test_the_tunnel_runs_in_the_container_with_ports_as_one_quoted_word() -> None:
    hostile = "echo '$(touch x)' \"`id`\"; exit 0 # ' \" \\"
    spec = _annotated(
        {TUNNEL_ANNOTATION: hostile},
        container("side"),
        container("web", ports=[{"containerPort": 8080}]),
    )
    web, side = _params(spec, "web"), _params(spec, "side")
    assert "dmsgw_tunnel_run" in web["entrypoint"][2]
    assert "dmsgw_tunnel_run" not in side["entrypoint"][2]
    words = shlex.split(web["entrypoint"][2])
    assert any(word.startswith(hostile + "\ndmsgw_rc=$?") for word in words)


def test_pod_ip_is_exported_and_answers_status_pod_ip_but_a_declared_one_wins() -> None:
    field = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    spec = _annotated(
        {POD_IP_ANNOTATION: " 10.244.1.7 "},
        container("a"),
        container("b", env=[{"name": "POD_IP", "value": "mine"}]),
        container("c", env=[{"name": "ADDR", **field}]),
    )
    assert "POD_IP=10.244.1.7" in _params(spec, "a")["environment"]
    assert "POD_IP=mine" in _params(spec, "b")["environment"]
    assert _params(spec, "c")["environment"] == ["ADDR=10.244.1.7", "POD_IP=10.244.1.7"]


@pytest.mark.parametrize(
    ("annotations", "containers", "said"),
    [
        ({TUNNEL_ANNOTATION: " \n"}, (), f"{TUNNEL}: is empty"),
        ({TUNNEL_ANNOTATION: "a\x00b"}, (), f"{TUNNEL}: a shell script cannot hold a NUL"),
        (
            {TUNNEL_ANNOTATION: "x" * (MAX_SCRIPT_BYTES + 1)},
            (),
            f"{TUNNEL}: {MAX_SCRIPT_BYTES + 1} bytes; the gateway runs at most {MAX_SCRIPT_BYTES}",
        ),
        (
            {POD_IP_ANNOTATION: "10.0.0.1; rm -rf /"},
            (),
            f"metadata.annotations[{json.dumps(POD_IP_ANNOTATION)}]: '10.0.0.1; rm -rf /' is "
            "not an IP address",
        ),
        (
            {TUNNEL_ANNOTATION: "wstunnel client"},
            (
                container("a", ports=[{"containerPort": 80}]),
                container("b", ports=[{"containerPort": 81}]),
            ),
            f"{TUNNEL}: containers 'a', 'b' declare ports",
        ),
        (
            {TUNNEL_ANNOTATION: "wstunnel client"},
            ({"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]},),
            f"{TUNNEL}: runs in the gateway's wrapper of container 'web', which needs a command",
        ),
        ({PRE_EXEC_ANNOTATION: MESH_SCRIPT}, (), f"{PRE_EXEC}: interLink's full-mesh script"),
    ],
)
def test_an_annotation_that_cannot_run_is_refused_naming_it(
    annotations: dict[str, str], containers: tuple[dict[str, Any], ...], said: str
) -> None:
    with pytest.raises(PodTranslationError) as refused:
        pod_to_ensemble(data(_annotated(annotations, *(containers or (container(),)))))
    assert str(refused.value).startswith(said), str(refused.value)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], FakeDMS]]:
    async with fake_dms_plugin(tmp_path) as opened:
        yield opened


async def test_the_mesh_script_is_refused_at_create_with_one_line(
    setup: tuple[TestClient[Any, Any], FakeDMS],
) -> None:
    client, dms = setup
    spec = pod(uid(9), command=["sleep", "1"])
    spec["metadata"]["annotations"][PRE_EXEC_ANNOTATION] = MESH_SCRIPT
    answer = await client.post("/create", data=json.dumps({"pod": spec, "container": []}))
    text = await answer.text()
    assert answer.status == 400, text
    assert text.startswith(f"pod default/p-{uid(9)[-4:]}: {PRE_EXEC}: interLink's full-mesh")
    assert "interlink.eu/mesh-network: disabled" in text and "\n" not in text.strip()
    assert dms.asked["deployment/new"] == 0
