"""``dmsgw.connect()``'s settings and life cycle: which DMS it finds without being told, the
directories it reads, and a clean exit whether or not the script closed it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.behaviors.session import ConnectSettingError, resolve_url
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.devnet_files import devnet_record as state
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context
from dmsgw.transport.rest import DEFAULT_URL

KEY = Ed25519PrivKey(bytes(range(70, 102)))
DEVNET_URLS = ("http://127.0.0.1:9990", "http://127.0.0.1:9991")


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DMSGW_DMS_URL", raising=False)
    return tmp_path / "state"


def test_a_running_devnet_is_the_dms_when_none_is_set(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_url(None) == (DEFAULT_URL, None)
    state.record("lab", DEVNET_URLS)
    url, devnet = resolve_url(None)
    assert url == DEVNET_URLS[0] and devnet == state.RunningDevnet(os.getpid(), "lab", DEVNET_URLS)
    assert resolve_url(DEVNET_URLS[1])[1] == devnet  # a node of it, named
    assert resolve_url("http://127.0.0.1:9999") == ("http://127.0.0.1:9999", None)
    monkeypatch.setenv("DMSGW_DMS_URL", "http://10.0.0.7:9999")
    assert resolve_url(None) == ("http://10.0.0.7:9999", None)  # a set URL wins
    state.forget()
    assert not (state_home / "dmsgw" / state.STATE_FILE).exists()


def test_a_devnet_that_has_gone_is_ignored(state_home: Path) -> None:
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    path = state.record("lab", DEVNET_URLS)
    path.write_text(path.read_text().replace(str(os.getpid()), ended.stdout.strip()))
    assert resolve_url(None) == (DEFAULT_URL, None)
    path.write_text("{not json")
    assert resolve_url(None) == (DEFAULT_URL, None)


def test_a_devnet_whose_pid_another_process_took_is_ignored(state_home: Path) -> None:
    """A SIGKILLed devnet leaves its record, and the kernel may give its PID to any process:
    a live PID that started at another time is not the devnet."""
    path = state.record("lab", DEVNET_URLS)
    data = json.loads(path.read_text())
    assert state.running() is not None
    path.write_text(json.dumps({**data, "started": data["started"] - 1}))
    assert state.running() is None
    assert resolve_url(None) == (DEFAULT_URL, None)


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [
        ("notaurl", None, "the DMS URL 'notaurl' is not a URL"),
        ("127.0.0.1:9999", None, "the DMS URL '127.0.0.1:9999' is not a URL"),
        (None, "localhost", "$DMSGW_DMS_URL 'localhost' is not a URL"),
    ],
)
def test_a_url_that_is_not_one_is_named(
    state_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str | None,
    env: str | None,
    message: str,
) -> None:
    if env is not None:
        monkeypatch.setenv("DMSGW_DMS_URL", env)
    with pytest.raises(ConnectSettingError) as info:
        resolve_url(url)
    assert str(info.value) == f"{message}: expected http://host:port, e.g. {DEFAULT_URL}"


# --- scripts that use the client ---------------------------------------------------------


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(2, seed="session-tests", early_timeout=True))
    yield background.start()
    background.stop()


@pytest.fixture(scope="module")
def script_env(devnet: Devnet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A gateway key ``dmsgw`` and its granted context, found only through ``$DMSGW_KEY_DIR``
    and ``$DMSGW_CAP_DIR``; the DMS through ``$DMSGW_DMS_URL``."""
    tmp_path = tmp_path_factory.mktemp("script")
    keys, caps = tmp_path / "keys", tmp_path / "caps"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DMSGW_TEST_SCRYPT_N", "16")  # written cheap to unlock
        KeyStore(keys).save("dmsgw", marshal_private_key(KEY), "pw")
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
    provider = provider_from_private_key(KEY)
    save_context(CapabilityContext(provider, name="dmsgw", provide=grant), directory=caps)
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),  # nothing from the real ~/.nunet
        "DMSGW_KEY_DIR": str(keys),
        "DMSGW_CAP_DIR": str(caps),
        "DMSGW_DMS_URL": devnet.urls[0],
        "DMS_PASSPHRASE": "pw",
        "PYTHONWARNINGS": "default",  # ResourceWarnings too
    }


SCRIPTS = {
    "asyncio.run, never closed": """
        import asyncio, dmsgw

        async def main():
            dms = dmsgw.connect()
            print((await dms.peers.list()).peers)

        asyncio.run(main())
    """,
    "plain code, never closed": """
        import dmsgw

        dms = dmsgw.connect()
        print(dms.peers.list().peers)
    """,
    "async with, private loop": """
        import asyncio, dmsgw

        async def main():
            async with dmsgw.connect() as dms:
                print((await dms.peers.list()).peers)

        asyncio.run(main())
    """,
    "async with, the caller's loop": """
        import asyncio, dmsgw

        async def main():
            async with dmsgw.connect(loop=asyncio.get_running_loop()) as dms:
                print((await dms.peers.list()).peers)

        asyncio.run(main())
    """,
}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=list(SCRIPTS))
def test_a_script_exits_without_warnings(
    devnet: Devnet, script_env: dict[str, str], script: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=script_env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.strip() == f"('{devnet.nodes[1].node.peer_id}',)"
