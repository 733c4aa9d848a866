"""``dmsgw agent``: the key unlocked once serves later commands, to its own user only."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.cli import COMMANDS
from dmsgw.cli.agent import Agent, AgentError, _ask, _listen, private_directory
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context

KEY = Ed25519PrivKey(bytes(range(90, 122)))
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(1, seed="cli-agent-tests", early_timeout=True))
    yield background.start()
    background.stop()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users may enter (tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="dmsgw-agent-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DMS_PASSPHRASE", "DMSGW_AGENT")}
    return {**env, "DMSGW_TEST_SCRYPT_N": "1024", **extra}


def _as_user(user: int) -> list[str]:
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def _dmsgw(*words: str, user: int | None = None) -> list[str]:
    prefix = [] if user is None else _as_user(user)
    return [*prefix, sys.executable, "-m", "dmsgw", *words]


@pytest.fixture
def agent(devnet: Devnet, shared_dir: Path) -> Iterator[tuple[list[str], dict[str, str]]]:
    """A key `gw` granted by the devnet, held by a foreground agent; the client's options."""
    keys, caps = shared_dir / "key", shared_dir / "cap"
    KeyStore(keys).save("gw", marshal_private_key(KEY), "pw")
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node", "/public"])
    caps.mkdir()
    save_context(
        CapabilityContext(provider_from_private_key(KEY), name="gw", provide=grant), directory=caps
    )
    (shared_dir / "run").mkdir(mode=0o700)
    env = _env(DMSGW_AGENT_SOCK=str(shared_dir / "run" / "agent.sock"))
    start = ["agent", "start", "--foreground", "--key", "gw", "--key-dir", str(keys)]
    server = subprocess.Popen(
        _dmsgw(*start), env={**env, "DMS_PASSPHRASE": "pw"}, stderr=subprocess.PIPE, text=True
    )
    assert server.stderr is not None
    assert "holding key 'gw'" in server.stderr.readline()  # printed once it listens
    options = [
        "--url",
        devnet.urls[0],
        "--key",
        "gw",
        "--key-dir",
        str(keys),
        "--cap-dir",
        str(caps),
    ]
    yield options, env
    server.terminate()
    server.wait(TIMEOUT_S)


def test_a_command_runs_through_the_agent_without_the_passphrase(
    devnet: Devnet, agent: tuple[list[str], dict[str, str]]
) -> None:
    options, env = agent
    command = _dmsgw("invoke", "/dms/node/peers/self", *options)
    done = subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == devnet.nodes[0].node.peer_id
    alone = subprocess.run(
        command,
        env={**env, "DMSGW_AGENT": "off"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert alone.returncode == 2 and "no passphrase for key 'gw'" in alone.stderr


def test_the_agent_passes_on_the_commands_exit_status_and_errors(
    agent: tuple[list[str], dict[str, str]],
) -> None:
    options, env = agent
    done = subprocess.run(
        _dmsgw("invoke", "/dms/node/no/such/behavior", *options),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 2 and done.stderr.startswith("dmsgw: error:")
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_another_user_is_refused_by_the_agent_and_refuses_it(
    agent: tuple[list[str], dict[str, str]], shared_dir: Path
) -> None:
    options, env = agent
    (shared_dir / "run").chmod(0o755)
    (shared_dir / "run" / "agent.sock").chmod(0o666)  # only the kernel's word is left
    ask = (  # a raw connection: the agent, not the client's own check, must refuse it
        "import os, socket; from dmsgw.cli.agent import _Lines\n"
        "conn = socket.socket(socket.AF_UNIX); conn.connect(os.environ['DMSGW_AGENT_SOCK'])\n"
        "print(_Lines(conn).next())  # refused before it says anything\n"
    )
    nobody = subprocess.run(
        [*_as_user(65534), sys.executable, "-c", ask],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert "this agent serves only its own user" in nobody.stdout, nobody.stderr
    client = subprocess.run(
        _dmsgw("invoke", "/dms/node/peers/self", *options, user=65534),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert "is served by another user: not using it" in client.stderr


def test_status_and_stop_and_the_time_to_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.sock"
    monkeypatch.setenv("DMSGW_AGENT_SOCK", str(path))
    now = [40.0]
    agent = Agent(_listen(path), key="k", expires_at=100.0, clock=lambda: now[0])
    serving = threading.Thread(target=agent.run)
    serving.start()
    assert (path.stat().st_mode & 0o777) == 0o600
    status = _ask("status")
    assert status is not None and status["key"] == "k" and status["expires_in_s"] == 60.0
    assert _ask("stop") == {"stopped": True}
    serving.join(TIMEOUT_S)
    assert not serving.is_alive() and not path.exists()
    assert _ask("status") is None
    expired = Agent(_listen(path), key="k", expires_at=100.0, clock=lambda: 100.0)
    expired.run()  # its time to live is over before it accepts anyone
    assert not path.exists()


def test_the_agent_runs_only_commands_that_need_the_key(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    agent = Agent(_listen(path), key="k", expires_at=1e18, clock=lambda: 0.0)
    serving = threading.Thread(target=agent.run)
    serving.start()
    try:
        from dmsgw.cli.agent import _Lines, _send

        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(path))
            _send(conn, {"argv": ["serve"], "cwd": "/", "env": {}}, fds=[0, 1, 2])
            answer = _Lines(conn).next()
        assert answer is not None and "the agent runs only" in str(answer["error"])
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(path))
            conn.sendall(b"\xff\xff\xff\xff")  # a header announcing 4 GiB
            answer = _Lines(conn).next()
        assert answer is not None and "a bad request" in str(answer["error"])
    finally:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(path))
            _send(conn, {"op": "stop"})
            conn.recv(100)
        serving.join(TIMEOUT_S)


def test_the_socket_directory_must_be_private(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    with pytest.raises(AgentError, match="may be entered by other users"):
        private_directory(open_dir)
    link = tmp_path / "link"
    link.symlink_to(open_dir)
    with pytest.raises(AgentError, match="not a directory of this user's"):
        private_directory(link)
    made = private_directory(tmp_path / "new" / "dir")
    assert made.stat().st_mode & 0o777 == 0o700


def test_agent_status_without_an_agent(tmp_path: Path) -> None:
    done = subprocess.run(
        _dmsgw("agent", "status"),
        env=_env(DMSGW_AGENT_SOCK=str(tmp_path / "none.sock")),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 1 and "no agent runs" in done.stdout


def test_help_lists_every_command_without_importing_any() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from dmsgw.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = ('aiohttp', 'pydantic', 'dmsgw.behaviors', 'dmsgw.cli.client_commands')\n"
        "print(repr([m for m in heavy if m in sys.modules])); print(out.getvalue())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    first, _, text = done.stdout.partition("\n")
    assert first == "[]", done.stderr
    for command in COMMANDS:
        assert f"    {command}" in text
