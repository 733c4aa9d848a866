"""Crash-only: SIGKILL the gateway during creates and deletes; no pod lost, none duplicated.

The DMS (an embedded devnet in this process) outlives the gateway (a `dmsgw serve` process with
key and capability files on disk). After every kill the gateway is started again on the same
state file, and the DMS is asked directly how many ensembles each pod has.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import dmsgw
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.interlink.translate import METADATA_POD_UID
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context

KEY = Ed25519PrivKey(bytes(range(150, 182)))
LIVE = {"Preparing", "Generating", "Committing", "Provisioning", "Running"}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(seed="recovery-tests"))
    yield background.start()
    background.stop()


class Gateway:
    """A `dmsgw serve` process that can be killed and started again on the same state."""

    def __init__(self, devnet: Devnet, tmp: Path) -> None:
        keys, caps = tmp / "key", tmp / "cap"
        self.env = dict(
            os.environ,
            DMS_PASSPHRASE="pw",
            DMSGW_TEST_SCRYPT_N="1024",
            DMSGW_DMS_URL=devnet.urls[0],
            DMSGW_KEY_NAME="gw",
            DMSGW_KEY_DIR=str(keys),
            DMSGW_CAP_CONTEXT="gw",
            DMSGW_CAP_DIR=str(caps),
            DMSGW_STATE_PATH=str(tmp / "state.sqlite3"),
            DMSGW_LOG_FORMAT="text",
        )
        KeyStore(keys).save("gw", marshal_private_key(KEY), "pw")
        caps.mkdir()
        grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node"])
        ctx = CapabilityContext(provider_from_private_key(KEY), name="gw", provide=grant)
        save_context(ctx, directory=caps)
        self.dms = dmsgw.connect(devnet.urls[0], key=KEY, context=ctx)
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> None:
        port, operator = _port(), _port()
        env = dict(
            self.env,
            DMSGW_LISTEN=f"127.0.0.1:{port}",
            DMSGW_OPERATOR_LISTEN=f"127.0.0.1:{operator}",
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmsgw", "serve"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # the "listening" announcement: ready to serve
            if "listening on" in line:
                break
        else:
            raise AssertionError("dmsgw serve did not start")
        self.url = f"http://127.0.0.1:{port}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.dms.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"r{i}",
            "namespace": "default",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox", "command": ["sh", "-c"], "args": ["sleep 60"]}
            ],
        },
    }


async def _ensembles(dms: dmsgw.Node, uid: str) -> list[str]:
    """Live ensembles of the pod, straight from the DMS."""
    listing = await dms.deployment.list(metadata={METADATA_POD_UID: uid})
    return [d.orchestrator_id for d in listing.deployments or () if d.status in LIVE]


async def _post(session: aiohttp.ClientSession, url: str, body: Any) -> int:
    async with session.post(url, data=json.dumps(body)) as resp:
        await resp.read()
        return resp.status


@pytest.mark.timeout(400)  # ~70 s on a loaded machine
@pytest.mark.parametrize("kill_after_s", [0.0, 0.002, 0.01, 0.05, 0.2])
def test_sigkill_during_create_and_delete_loses_and_duplicates_nothing(
    devnet: Devnet, tmp_path: Path, kill_after_s: float
) -> None:
    gateway = Gateway(devnet, tmp_path)
    pods = [_pod(int(kill_after_s * 10000) * 10 + i) for i in range(3)]

    async def scenario() -> None:
        async with aiohttp.ClientSession(headers={"Content-Type": "application/json"}) as session:
            gateway.start()
            created = []
            for spec in pods:
                request = asyncio.ensure_future(
                    _post(
                        session,
                        gateway.url + "/create",
                        {"pod": spec, "container": [{"name": "main"}]},
                    )
                )
                await asyncio.sleep(kill_after_s)  # where in the create the kill lands
                gateway.kill()
                try:
                    if await request == 200:
                        created.append(spec)
                except aiohttp.ClientError:
                    pass  # killed before answering: interLink marks the pod failed, no retry
                gateway.start()
            for spec in created:  # every acknowledged pod runs, in exactly one ensemble
                for _ in range(200):
                    async with session.get(gateway.url + "/status", data=json.dumps([spec])) as r:
                        (status,) = await r.json()
                    if "running" in status["containers"][0]["state"]:
                        break
                    await asyncio.sleep(0.05)
                else:
                    listing = await gateway.dms.deployment.list()
                    raise AssertionError(f"{spec['metadata']['uid']} never ran: {status} {listing}")
                assert len(await _ensembles(gateway.dms, spec["metadata"]["uid"])) == 1
            for spec in pods:  # none that was not acknowledged runs twice either
                assert len(await _ensembles(gateway.dms, spec["metadata"]["uid"])) <= 1
            # a delete killed half-way is finished by the restarted gateway
            for spec in created:
                deleting = asyncio.ensure_future(_post(session, gateway.url + "/delete", spec))
                await asyncio.sleep(kill_after_s)
                gateway.kill()
                try:
                    await deleting
                except aiohttp.ClientError:
                    await asyncio.sleep(0)
                gateway.start()
                await _post(
                    session, gateway.url + "/delete", spec
                )  # interLink never retries; we may
                for _ in range(200):
                    if not (await _ensembles(gateway.dms, spec["metadata"]["uid"])):
                        break
                    await asyncio.sleep(0.05)
                assert (await _ensembles(gateway.dms, spec["metadata"]["uid"])) == []

    try:
        asyncio.run(scenario())
    finally:
        gateway.stop()
