"""``/getLogs`` while the DMS does not answer: the runs the gateway kept are served from its
copies, the live run from where the DMS last wrote it; a run of which the gateway has neither
is a 503 that says the DMS is silent, where the logs are, and what the gateway does keep (never
a 500, never the deadline's generic 503).

Over the in-memory DMS of :mod:`tests.gateway_fakes` (an injected clock, bounded waits on the
gateway's own state).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.logs import get_logs as pod_logs
from dmsgw.interlink.plugin_errors import BackendUnavailable
from dmsgw.interlink.records.container_runs import Runs
from dmsgw.interlink.wire.parsing import parse_logs_body
from dmsgw.transport.rest import DMSRequestError, DMSTimeoutError, TransportError
from tests.support.gateway_fakes import WAIT_S, FakeDMS, create, gateway_on, pod, poll, uid, until

OWNER = "did:key:the-gateway"
START, EXIT = b"dmsgw.io/started\n", b"dmsgw.io/exit-code=%d\n"


class _SilentDMS(FakeDMS):
    """A DMS that, once ``silence`` is set, answers nothing: each call fails as that error
    (refused connections, or no reply before the message expired), or hangs."""

    silence: Exception | None = None
    hang = False

    async def __call__(self, behavior: Any, payload: Any = None, **options: Any) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        if self.silence is not None:
            raise self.silence
        return await super().__call__(behavior, payload, **options)


async def _ended_once(tmp_path: Path, policy: str) -> tuple[Gateway, _SilentDMS, dict[str, Any]]:
    """A pod whose container ran once and ended with 3, that end seen (so kept)."""
    dms = _SilentDMS(tmp_path / "logs")
    (tmp_path / "logs" / "stdout.log").write_bytes(START + b"the job's last words\n")
    (tmp_path / "logs" / "stderr.log").write_bytes(START + b"oops\n" + EXIT % 3)
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    spec = pod(uid(7), policy=policy, command=["sh", "-c", "exit 3"])
    await create(gateway, spec)
    await until(lambda: bool(dms.live(uid(7))), "deployed")
    dms.live(uid(7))[0].allocations["main"] = "failed"
    await _seen(gateway, spec, "ended", "terminated")
    return gateway, dms, spec


async def _seen(gateway: Gateway, spec: dict[str, Any], runs: str, state: str) -> None:
    """Until the container's ledger shows a run ``runs`` ("started", "ended") and interLink's
    poll shows it in ``state``: what interLink last saw decides the run a request serves."""
    uid = spec["metadata"]["uid"]
    await until(
        lambda: getattr(Runs.from_map(gateway.book.records[uid].runs.get("main")), runs), runs
    )
    async with asyncio.timeout(WAIT_S):
        while getattr((await poll(gateway, spec))[0].containers[0].state, state) is None:
            await asyncio.sleep(0.01)


async def _read(gateway: Gateway, spec: dict[str, Any], **opts: Any) -> bytes:
    meta = spec["metadata"]
    body = {"Namespace": "default", "PodUID": meta["uid"], "PodName": meta["name"]}
    request = parse_logs_body(json.dumps({**body, "ContainerName": "main", "Opts": opts}).encode())
    return b"".join([chunk async for chunk in gateway.logs(request)])


@pytest.mark.parametrize(
    "silence",
    [
        TransportError("/dms/node/deployment/logs: connection refused"),
        DMSTimeoutError("/dms/node/deployment/logs", detail="the DMS is busy"),
        DMSRequestError("/dms/node/deployment/logs", 500, "internal error"),  # it answered
    ],
)
async def test_a_kept_run_is_served_while_the_dms_is_silent(
    tmp_path: Path, silence: Exception
) -> None:
    gateway, dms, spec = await _ended_once(tmp_path, "Never")
    try:
        dms.silence = silence
        assert await _read(gateway, spec) == b"the job's last words\noops\n"
    finally:
        await gateway.close()


async def _running(tmp_path: Path) -> tuple[Gateway, _SilentDMS, dict[str, Any]]:
    """A pod whose container runs, its start read from the DMS's files (so the gateway saw
    where the DMS writes them)."""
    dms = _SilentDMS(tmp_path / "logs")
    (tmp_path / "logs" / "stdout.log").write_bytes(START + b"working\n")
    (tmp_path / "logs" / "stderr.log").write_bytes(START)
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    spec = pod(uid(8), policy="Always", command=["sleep", "3600"])
    await create(gateway, spec)
    await _seen(gateway, spec, "started", "running")
    return gateway, dms, spec


@pytest.mark.parametrize(
    "silence",
    [
        TransportError("/dms/node/deployment/logs: connection refused"),
        DMSTimeoutError("/dms/node/deployment/logs", detail="the DMS is busy"),
    ],
)
async def test_the_live_run_is_read_where_the_dms_last_wrote_it(
    tmp_path: Path, silence: Exception
) -> None:
    """A container still running while the DMS does not answer: its output up to the DMS's
    last write, from the files on the DMS's host (the gateway's), not a 5xx (decision 140)."""
    gateway, dms, spec = await _running(tmp_path)
    try:
        dms.silence = silence
        assert await _read(gateway, spec) == b"working\n"
        assert await _read(gateway, spec, Tail=1) == b"working\n"
    finally:
        await gateway.close()


@pytest.mark.parametrize(
    ("run", "shown"),
    [("ended", b"the job's last words\noops\n"), ("running", b"working\n")],
)
async def test_the_logs_are_served_when_the_dms_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str, shown: bytes
) -> None:
    """A DMS that takes the connection and never answers: after a bounded wait, well within
    the route's deadline, the kept copy of an ended run, the files where the DMS last wrote a
    live one."""
    monkeypatch.setattr(pod_logs, "SILENT_AFTER_S", 0.05)
    made = _ended_once(tmp_path, "Never") if run == "ended" else _running(tmp_path)
    gateway, dms, spec = await made
    try:
        dms.hang = True
        async with asyncio.timeout(10):
            assert await _read(gateway, spec) == shown
    finally:
        dms.hang = False
        await gateway.close()


@pytest.mark.parametrize("hang", [False, True])
async def test_logs_never_seen_written_are_a_503_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hang: bool
) -> None:
    """The live run's files gone from where the DMS wrote them (or the DMS on another host):
    the answer names the DMS's silence, the container and its run, and what the gateway
    keeps; a DMS that hangs is named as such, within the bounded wait."""
    monkeypatch.setattr(pod_logs, "SILENT_AFTER_S", 0.05)
    gateway, dms, spec = await _running(tmp_path)
    try:
        for name in ("stdout.log", "stderr.log"):
            (tmp_path / "logs" / name).unlink()
        dms.hang = hang
        dms.silence = TransportError("/dms/node/deployment/logs: connection refused")
        async with asyncio.timeout(10):
            with pytest.raises(BackendUnavailable) as info:
                await _read(gateway, spec)
        message = str(info.value)
        why = "no answer within 0.05 s" if hang else "connection refused"
        assert "the DMS does not answer" in message and why in message
        assert f"they are gone from {tmp_path / 'logs'}" in message
        assert "run 1 of container 'main'" in message and "saw end" in message
    finally:
        dms.hang = False
        await gateway.close()


async def test_logs_the_gateway_never_saw_written_are_a_503_saying_so(tmp_path: Path) -> None:
    """A run whose start the gateway learnt from the DMS's status alone (a container without
    the wrapper's markers is never read for them): nothing tells where its files are."""
    dms = _SilentDMS(tmp_path / "logs")
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    spec = pod(uid(9), policy="Always")  # no command: no wrapper
    try:
        await create(gateway, spec)
        await until(lambda: bool(dms.live(uid(9))), "deployed")
        dms.live(uid(9))[0].allocations["main"] = "running"
        await _seen(gateway, spec, "started", "running")
        dms.silence = TransportError("/dms/node/deployment/logs: connection refused")
        with pytest.raises(BackendUnavailable) as info:
            await _read(gateway, spec)
        assert "the gateway has not seen them written" in str(info.value)
    finally:
        dms.hang = False
        await gateway.close()
