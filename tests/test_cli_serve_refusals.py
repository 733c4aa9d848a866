"""``dmsgw serve`` refuses what would be unsafe, in one line naming the problem and the fix.

Each case runs the real entry point (``python -m dmsgw serve``) as an operator would and
checks the process exits with status 2 at once, its last stderr line is the refusal (no
traceback), and nothing in the state file was changed: no DMS chosen, a bad YAML
configuration, a missing secret, an unreadable DMS log directory, a state made with another
DMS (both ways: a real DMS's state under ``--devnet``, and a demo's state pointed at a DMS),
and a state written by a newer release.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.interlink.state.state_binding import EMBEDDED_DEVNET, DmsIdentity, StateBinding
from dmsgw.interlink.state.state_schema import STATE_SCHEMA
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keyfile import ScryptParams
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context
from dmsgw.transport.envelope import Handle

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "dmsgw.yaml"
KEY = Ed25519PrivKey(bytes(range(60, 92)))
ELSEWHERE = DmsIdentity.of(
    Handle.from_public_key(Ed25519PrivKey(bytes(range(32))).public_key()), "http://dms:9999"
)
RUN_S = 60.0  # a bound, not a pace: each refusal comes before anything is served


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: none of the runner's DMSGW_*, ports nobody else uses."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DMSGW_", "DMS_", "XDG_"))}
    return {
        **clean,
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "DMSGW_LISTEN": "127.0.0.1:0",
        "DMSGW_OPERATOR_LISTEN": "127.0.0.1:0",
    }


def refused(env: dict[str, str], *args: str) -> str:
    """Run ``dmsgw serve args``; it must exit 2 with one line: that line, without the prefix."""
    done = subprocess.run(
        [sys.executable, "-m", "dmsgw", "serve", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_S,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stdout
    last = done.stderr.splitlines()[-1]
    assert last.startswith("dmsgw: error: ")
    return last.removeprefix("dmsgw: error: ")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def contents(path: Path) -> tuple[object, ...]:
    """What the state holds: its version, its records, what it recorded about itself."""
    db = sqlite3.connect(path)
    try:
        return (
            db.execute("PRAGMA user_version").fetchall(),
            db.execute("SELECT uid, record FROM pods ORDER BY uid").fetchall(),
            db.execute("SELECT key, value FROM state_meta ORDER BY key").fetchall(),
        )
    finally:
        db.close()


async def bound_state(path: Path, dms: DmsIdentity, pods: int = 2) -> tuple[object, ...]:
    """A state file made with ``dms``, holding ``pods`` records; its :func:`contents`."""
    store = PodStore(path)
    for i in range(pods):
        await store.put(f"uid-{i}", {"uid": f"uid-{i}", "phase": "running"})
    StateBinding(store).check(dms)
    await store.close()
    return contents(path)


def test_without_a_dms_it_exits_at_once_naming_both_ways(env: dict[str, str]) -> None:
    env["DMSGW_DMS_ULR"] = "http://typo.example:9999"  # the typo of the issue
    said = refused(env)
    assert said.startswith("no DMS chosen: set dms_url (--dms-url, $DMSGW_DMS_URL")
    assert "or pass --devnet ($DMSGW_DEVNET=1, devnet: true)" in said
    assert not (Path(env["XDG_STATE_HOME"]) / "dmsgw").exists()  # no state made either


def test_a_bad_config_file_is_named_with_the_key_and_its_line(
    env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text("devnet: true\npods_capacty: 500\n")
    assert refused(env, "--config", str(path)) == (
        f"pods_capacty (file {path}:2): unknown key; did you mean 'pods_capacity'?"
    )
    path.write_text("devnet: true\npods_capacity: lots\ndeadline_s: 500\n")
    env["DMSGW_CONFIG"] = str(path)
    assert refused(env).split("; ") == [
        f"pods_capacity (file {path}:2): input should be a valid integer, unable to parse "
        "string as an integer (got 'lots')",
        f"deadline_s (file {path}:3): input should be less than or equal to 110 (got 500)",
    ]


def test_the_example_file_loads_as_documented(tmp_path: Path) -> None:
    config = load_config(config_file=EXAMPLE, env={})
    assert config.dms_url == "http://127.0.0.1:9999" and not config.embedded_devnet
    assert config.listen.path == Path("/var/run/dmsgw/plugin.sock")
    assert config.state_path == Path("/var/lib/dmsgw/gateway.sqlite3")
    assert (config.pods_capacity, config.log_format) == (500, "json")
    assert set(config.sources) >= {"dms_url", "listen", "state_path", "key_dir", "cap_dir"}


def test_a_missing_passphrase_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    KeyStore(keys, scrypt_params=ScryptParams(16)).save(
        "gw", marshal_private_key(KEY), "the passphrase"
    )
    state = tmp_path / "gw.sqlite3"
    args = ("--dms-url", "http://127.0.0.1:9", "--key", "gw", "--key-dir", str(keys))
    assert refused(env, *args, "--state-path", str(state)) == (
        "no passphrase for key 'gw': set DMS_PASSPHRASE (there is no terminal to prompt on)"
    )
    token_file = tmp_path / "absent-token"
    said = refused(env, "--devnet", "--operator-token-file", str(token_file))
    assert said == (
        f"operator_token_file (flag --operator-token-file): cannot read {token_file}: No such "
        "file or directory"
    )


def test_an_unreadable_dms_log_directory_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    logs = tmp_path / "dms-logs"
    said = refused(env, "--devnet", "--dms-log-dir", str(logs))
    assert said == (
        f"dms_log_dir (flag --dms-log-dir): {logs} cannot be read: No such file or directory; "
        "mount the directory where the DMS writes allocation logs there, readable by this "
        f"user (uid {os.geteuid()}), or unset dms_log_dir"
    )
    logs.write_text("a file, not the directory")
    assert "cannot be read: Not a directory; mount" in refused(
        env, "--devnet", "--dms-log-dir", str(logs)
    )


async def test_a_real_dms_s_state_is_not_resumed_on_the_devnet(
    env: dict[str, str], tmp_path: Path
) -> None:
    state = tmp_path / "gw.sqlite3"
    before = await bound_state(state, ELSEWHERE)
    said = refused(env, "--devnet", "--state-path", str(state))
    assert said == (
        f"the state file {state} (2 pods) was made with {ELSEWHERE}, not with the embedded "
        "devnet: point the gateway back at that DMS, or give this one its own state_path "
        "(the file is left as it is)"
    )
    assert contents(state) == before


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(seed="refusal-tests"))
    yield background.start()
    background.stop()


async def test_a_demo_s_state_is_not_resumed_against_a_dms(
    env: dict[str, str], tmp_path: Path, devnet: Devnet
) -> None:
    """The issue's case: pods made on the embedded devnet, the gateway then pointed at a DMS
    (here a devnet outside the gateway, which is a DMS to it): refused, naming both."""
    keys, caps = tmp_path / "key", tmp_path / "cap"
    KeyStore(keys, scrypt_params=ScryptParams(16)).save("gw", marshal_private_key(KEY), "pw")
    caps.mkdir()
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
    save_context(
        CapabilityContext(provider_from_private_key(KEY), name="gw", provide=grant),
        directory=caps,
    )
    state = tmp_path / "gw.sqlite3"
    before = await bound_state(state, EMBEDDED_DEVNET, pods=3)
    env.update(
        DMS_PASSPHRASE="pw",
        DMSGW_DMS_URL=devnet.urls[0],
        DMSGW_KEY_NAME="gw",
        DMSGW_KEY_DIR=str(keys),
        DMSGW_CAP_CONTEXT="gw",
        DMSGW_CAP_DIR=str(caps),
        DMSGW_STATE_PATH=str(state),
    )
    said = refused(env)
    assert said.startswith(
        f"the state file {state} (3 pods) was made with the embedded devnet, not with DMS "
        "peer 12D3KooW"
    )
    assert f") at {devnet.urls[0]}: point the gateway back at that DMS" in said
    assert contents(state) == before


def test_a_state_from_a_newer_release_is_refused_naming_its_version(
    env: dict[str, str], tmp_path: Path
) -> None:
    state = tmp_path / "gw.sqlite3"
    db = sqlite3.connect(state)
    db.execute("CREATE TABLE pods (uid TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID")
    db.execute(f"PRAGMA user_version = {STATE_SCHEMA + 1}")
    db.commit()
    db.close()
    before = digest(state)
    assert refused(env, "--devnet", "--state-path", str(state)) == (
        f"the state file {state} was written by a newer dmsgw (state schema {STATE_SCHEMA + 1}; "
        "this release "
        f"reads up to {STATE_SCHEMA}): run that release or a newer one, or give this one another "
        "state_path; the file is left as it is"
    )
    assert digest(state) == before
