"""``dmsgw devnet up`` and ``dmsgw devnet grant``: what ``up`` prints works, and it stops clean.

``up`` runs in a real subprocess (its output is read as it comes, with a deadline); the printed
grant and invoke commands are then run as printed, through the ``dmsgw`` command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.cli import main
from dmsgw.devnet.devnet import node_key
from dmsgw.devnet_files import devnet_record as state
from dmsgw.keys.did import DID
from dmsgw.keys.ucan import load_context

STARTUP_S = 20.0


@pytest.fixture
def gateway_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Key and capability directories of a throwaway gateway key ``dmsgw``, and a state
    directory where `devnet up` records itself (no DMS URL set)."""
    monkeypatch.delenv("DMSGW_DMS_URL", raising=False)
    env = {
        "DMSGW_KEY_DIR": str(tmp_path / "key"),
        "DMSGW_CAP_DIR": str(tmp_path / "cap"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "DMS_PASSPHRASE": "devnet test",
        "DMSGW_TEST_SCRYPT_N": "16",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _read_until(proc: subprocess.Popen[bytes], marker: str) -> list[str]:
    """Lines of ``proc``'s stdout up to the one containing ``marker`` (bounded wait; read
    from the file descriptor, so nothing hides in a Python buffer while select() waits)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    text = ""
    while marker not in text:
        ready, _, _ = select.select([fd], [], [], STARTUP_S)
        if not ready:
            raise AssertionError(f"no {marker!r} within {STARTUP_S} s; got {text!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"`devnet up` exited early: {text!r}")
        text += chunk.decode()
    return text.splitlines()


@contextlib.contextmanager
def _devnet_up(
    env: dict[str, str], seed: str, *more: str
) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmsgw", "devnet", "up", "--base-port", "0", "--seed", seed, *more],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    try:
        yield proc, _read_until(proc, "Then:")
    finally:
        if proc.poll() is None:  # a failed test: still stop it cleanly, so it removes its files
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STARTUP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait(STARTUP_S)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def devnet_up(gateway_env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    with _devnet_up(gateway_env, "cli-test") as up:
        yield up


def test_a_second_devnet_that_stops_leaves_the_first_one_recorded(
    gateway_env: dict[str, str],
) -> None:
    with _devnet_up(gateway_env, "first", "--nodes", "1") as (first, _):
        recorded = state.running()
        assert recorded is not None and recorded.pid == first.pid
        with _devnet_up(gateway_env, "second", "--nodes", "1") as (second, _):
            now = state.running()
            assert now is not None and (now.pid, now.seed) == (second.pid, "second")
            second.send_signal(signal.SIGTERM)
            assert second.wait(STARTUP_S) == 0
        assert state.running() == recorded  # the commands still find the first devnet


def test_up_prints_nodes_and_commands_that_work(
    devnet_up: tuple[subprocess.Popen[bytes], list[str]],
    gateway_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc, lines = devnet_up
    text = "\n".join(lines)
    urls = re.findall(r"^node\d+  (http://127\.0\.0\.1:\d+)", text, re.M)
    assert len(urls) == 3
    assert len(re.findall(r"DID +did:key:z6Mk\w+", text)) == 3
    assert len(re.findall(r"peer ID +12D3KooW\w+", text)) == 3
    workdir = Path(re.search(r"^work dir (\S+)", text, re.M).group(1))  # type: ignore[union-attr]
    assert workdir.is_dir()
    assert state.running() == state.RunningDevnet(proc.pid, "cli-test", tuple(urls))
    who = (
        "each pod runs as a user and group of its own"
        if os.geteuid() == 0
        else "allocations run as this process's user"
    )
    assert re.search(rf"^{re.escape(who)}", text, re.M), text

    assert "The gateway key 'dmsgw' does not exist yet: `dmsgw whoami` creates it." in text
    assert main(["key", "new", "dmsgw"]) == 0
    gateway_did = capsys.readouterr().out.strip()
    grant = re.search(r"grant +(dmsgw devnet grant .*--node 1 .*)$", text, re.M)
    assert grant is not None
    assert " --cap /dms/node --cap /public --cap /broadcast --topic /nunet " in grant.group(1)
    assert main(shlex.split(grant.group(1))[1:]) == 0  # the DID is the key's (`key new` above)
    assert json.loads(capsys.readouterr().out)["tok"][0]["dms"]["sub"]["uri"] == gateway_did

    invoke = re.search(r"Then: (dmsgw invoke .*)$", text, re.M)
    assert invoke is not None and invoke.group(1) == "dmsgw invoke /dms/node/peers/list"
    assert main(shlex.split(invoke.group(1))[1:]) == 0  # found through the state directory
    assert len(json.loads(capsys.readouterr().out)["Peers"]) == 2
    node2 = re.findall(r"DID +(did:key:z6Mk\w+)", text)[2]
    assert main(["invoke", "/public/hello", "--to", node2]) == 0  # granted /public too
    assert json.loads(capsys.readouterr().out)["DID"]["uri"] == node2
    assert main(["invoke", "/broadcast/hello", "--timeout", "1"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 3

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(STARTUP_S) == 0
    assert proc.stderr is not None and b"stopped" in proc.stderr.read()
    assert not workdir.exists()
    assert not (Path(gateway_env["XDG_STATE_HOME"]) / "dmsgw" / state.STATE_FILE).exists()


def test_bad_flags_are_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["devnet", "up", "--nodes", "0"])
    assert exit_info.value.code == 2
    assert "a devnet has 1 to 64 nodes, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["devnet", "up", "--base-port", "70000"])
    assert "70000 is not a port number" in capsys.readouterr().err
    assert main(["devnet", "up", "--base-port", "65535"]) == 2
    assert "base port 65535 leaves no room for 3 nodes" in capsys.readouterr().err
    assert main(["devnet", "up", "--base-port", "0", "--run-as", "no-such-user"]) == 2
    assert "run as 'no-such-user': no user 'no-such-user' on this host" in capsys.readouterr().err
    assert main(["devnet", "up", "--base-port", "0", "--run-as", "root"]) == 2
    wanted = "allocations never run as root" if os.geteuid() == 0 else "needs root"
    assert wanted in capsys.readouterr().err


def test_a_port_in_use_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["devnet", "up", "--nodes", "1", "--base-port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1 from port {port}" in capsys.readouterr().err


def test_grant_refuses_what_it_cannot_issue(
    gateway_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["devnet", "grant", "did:key:nope"]) == 2
    assert "is not a did:key DID" in capsys.readouterr().err
    assert main(["devnet", "grant", "--anchor", "dmsgw"]) == 2
    assert "run `dmsgw whoami` first (it creates the key), or give the DID" in (
        capsys.readouterr().err
    )
    did = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"
    assert main(["devnet", "grant", "--cap", "dms/node", did]) == 2
    assert "a capability is a path" in capsys.readouterr().err
    assert main(["devnet", "grant", "--duration", "0s", did]) == 2
    assert "must be positive" in capsys.readouterr().err


GATEWAY_DID = "did:key:z6MkehRgf7yJbgaGfYsdoAsKdBPE3dj2CYhowQdcjqSJgvVd"


def test_grant_follows_the_running_devnet(
    gateway_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its seed is the default, and a node it does not have is refused."""
    urls = ["http://127.0.0.1:9990", "http://127.0.0.1:9991", "http://127.0.0.1:9992"]
    state.record("lab", urls)  # a `devnet up --seed lab` of 3 nodes (this process: alive)
    assert main(["devnet", "grant", "--node", "7", GATEWAY_DID]) == 2
    assert capsys.readouterr().err == (
        "dmsgw: error: --node 7: the running devnet (seed 'lab') has 3 node(s), numbered 0 to 2\n"
    )
    assert main(["devnet", "grant", "--node", "2", GATEWAY_DID]) == 0
    (token,) = json.loads(capsys.readouterr().out)["tok"]
    assert token["dms"]["iss"]["uri"] == DID.from_public_key(node_key("lab", 2).public_key()).uri
    assert token["dms"]["cap"] == ["/dms/node", "/public", "/broadcast"]  # all a gateway uses
    assert token["dms"]["topic"] == ["/nunet"]
    assert main(["devnet", "grant", "--node", "64", GATEWAY_DID]) == 2
    assert "--node 64: nodes are numbered from 0 to 63" in capsys.readouterr().err


def test_grant_anchors_before_it_prints(gateway_env: dict[str, str], tmp_path: Path) -> None:
    """`dmsgw devnet grant --anchor dmsgw DID | head -c 100`: the reader is gone before the
    token list is written, and the anchor is saved all the same, without a traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # a closed pipe: writing to it fails
    try:
        result = subprocess.run(
            [sys.executable, "-m", "dmsgw", "devnet", "grant", "--anchor", "dmsgw", GATEWAY_DID],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env={**os.environ, **gateway_env},
            check=False,
            timeout=STARTUP_S,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141 and b"Traceback" not in result.stderr, result.stderr
    anchored = load_context("dmsgw", directory=Path(gateway_env["DMSGW_CAP_DIR"]))
    assert anchored.did == DID(GATEWAY_DID) and len(anchored.list_roots()[2].present()) == 1
