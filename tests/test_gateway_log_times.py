"""``/getLogs`` with the kubelet's meanings: ``Bytes`` (``limitBytes``) is the first bytes of
what the other options select; ``Timestamps`` and ``SinceTime`` use the time each line was
written (the embedded devnet records it as it copies the output); the allocation is found by
its key, and concurrent requests for one allocation never read a log file that another fetch
is rewriting (a DMS rewrites it in place on every ``deployment/logs``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.catalog import Behavior
from dmsgw.behaviors.deployment import DeploymentLogsResponse
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet_files.log_times import Written, entry, parse, times_path, written_by
from dmsgw.interlink.logs.dms_logs import fetched_logs, read_logs
from dmsgw.interlink.plugin_errors import PluginRequestError
from dmsgw.interlink.wire.bodies import ContainerLogOpts
from dmsgw.interlink.wire.parsing import parse_logs_body
from tests.support.gateway_fakes import ClosedTurns, FakeDMS, create, gateway_on, pod, uid, until
from tests.support.plugin_api import create_pod, log_request, pod_of, shell_container, wait_state


async def _get_logs(client: Any, spec: dict[str, Any], **opts: Any) -> str:
    resp = await client.get("/getLogs", data=log_request(spec, "main", **opts))
    assert resp.status == 200, await resp.text()
    return str(await resp.text())


async def test_bytes_is_the_first_bytes_of_what_is_selected(plugin: Any) -> None:
    client, _ = plugin
    spec = pod_of([shell_container("main", "echo first line; echo second line; echo third line")])
    await create_pod(client, spec)
    await wait_state(client, spec, "terminated")
    assert await _get_logs(client, spec, Bytes=8) == "first li"
    assert await _get_logs(client, spec, Tail=2, Bytes=8) == "second l"


async def test_lines_carry_the_time_they_were_written_not_the_time_they_were_read(
    plugin: Any,
) -> None:
    client, _ = plugin
    spec = pod_of([shell_container("main", "echo early; sleep 1; echo late >&2")])
    await create_pod(client, spec)
    await wait_state(client, spec, "terminated")
    stamped = (await _get_logs(client, spec, Timestamps=True)).splitlines()
    times = {
        text: datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
        for at, text in (line.split(" ", 1) for line in stamped)
    }
    assert set(times) == {"early", "late"}
    assert times["early"] < times["late"]  # a second apart as written; read at one time
    since = datetime.fromtimestamp(math.floor(times["early"]) + 1, UTC)
    later = await _get_logs(client, spec, SinceTime=since.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert later == "late\n"


class RewritingDMS(FakeDMS):
    """A DMS that rewrites the log files in place on each ``deployment/logs``, as the DMS does
    (truncate, then write, with round trips in between)."""

    LOG = b"".join(b"line %d of the log\n" % n for n in range(200))

    async def __call__(self, behavior: Behavior[Any, Any], payload: Any = None, **kw: Any) -> Any:
        if behavior.name.endswith("deployment/logs"):
            path = Path(self._logs, "stdout.log")
            path.write_bytes(b"")
            for _ in range(3):
                await asyncio.sleep(0)
            path.write_bytes(self.LOG)
        return await super().__call__(behavior, payload, **kw)


async def test_concurrent_log_requests_find_the_allocation_by_its_key_and_read_it_whole(
    tmp_path: Path, clock: FixedClock
) -> None:
    dms = RewritingDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock)
    try:
        spec = pod(uid(7), command=["sh", "-c", "sleep 60"])
        await create(gateway, spec)
        # The follower reads the running deployment's manifest once (where it runs): only
        # then does the count say what the log requests ask.
        await until(lambda: dms.asked["deployment/manifest"] > 0, "the placement read")
        manifests = dms.asked["deployment/manifest"]
        request = parse_logs_body(log_request(spec, "main").encode())

        async def read() -> bytes:
            return b"".join([chunk async for chunk in gateway.logs(request)])

        logs = await asyncio.gather(*(read() for _ in range(8)))
        assert logs == [RewritingDMS.LOG] * 8
        assert dms.asked["deployment/manifest"] == manifests  # found by its key
    finally:
        await gateway.close()


async def test_a_fetch_never_rewrites_files_being_read_and_readers_together_share_one(
    tmp_path: Path,
) -> None:
    """Each fetch has the DMS rewrite the files: none starts while a reader of the files is
    still reading. Readers that come while a fetch is under way read what it wrote (eight at
    once: one fetch); one that comes after waits and fetches anew. Another allocation's
    fetches do not wait for these."""
    holding: dict[str, int] = {"pod.main": 0, "pod.side": 0}
    fetches: dict[str, int] = {"pod.main": 0, "pod.side": 0}

    async def invoke(behavior: Behavior[Any, Any], payload: Any = None, **_: Any) -> Any:
        allocation = payload.allocation_name
        assert holding[allocation] == 0, "a fetch while its files were read"
        fetches[allocation] += 1
        await asyncio.sleep(0)
        return DeploymentLogsResponse(logs_written_to=str(tmp_path))

    async def read(allocation: str) -> None:
        async with fetched_logs(invoke, "ens", allocation):
            holding[allocation] += 1
            for _ in range(3):  # the read, in a thread
                await asyncio.sleep(0)
            holding[allocation] -= 1

    await asyncio.gather(*(read("pod.main") for _ in range(8)), read("pod.side"))
    assert fetches == {"pod.main": 1, "pod.side": 1}
    first = asyncio.ensure_future(read("pod.main"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # its fetch is done, it reads
    await asyncio.gather(first, read("pod.main"))
    assert fetches["pod.main"] == 3


def test_the_side_record_skips_what_is_garbled_and_covers_a_line_by_its_end() -> None:
    record = parse(b"5 100\ngarbage\n3 90\n12 200\n12 300\n7\n20 400")
    assert record == [Written(5, 100), Written(12, 200), Written(20, 400)]
    assert [written_by(record, end) for end in (1, 5, 6, 12, 20, 21)] == [
        100,
        100,
        200,
        200,
        400,
        None,
    ]


async def test_followed_output_is_stamped_by_the_record_and_counts_against_bytes(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stdout.log"
    log.write_bytes(b"one\n")
    times_path(log).write_bytes(entry(4, 1_000 * NS_PER_SECOND))
    writes = iter([(b"two\nthree\n", 2_000), (b"", 0)])

    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        yield tmp_path

    async def grow() -> None:
        data, at_s = next(writes)
        if data:
            with log.open("ab") as f:
                f.write(data)
            with times_path(log).open("ab") as f:
                f.write(entry(log.stat().st_size, at_s * NS_PER_SECOND))

    opts = ContainerLogOpts(Follow=True, Timestamps=True, Bytes=60)
    chunks = []
    async for chunk in read_logs(fetch, opts, running=lambda: True, interval_s=0):
        chunks.append(chunk)
        await grow()
    assert (
        b"".join(chunks)
        == (
            b"1970-01-01T00:16:40.000000Z one\n"
            b"1970-01-01T00:33:20.000000Z two\n"  # its record's time, not the read's
        )[:60]
    )


async def test_previous_logs_of_a_pod_that_never_restarted_are_the_callers_mistake(
    plugin: Any,
) -> None:
    """The kubelet answers ``--previous`` without a previous run with a 400 naming it; the
    gateway answered 500, which reads as its own failure."""
    client, _ = plugin
    spec = pod_of([shell_container("main", "echo only run")])
    await create_pod(client, spec)
    await wait_state(client, spec, "terminated")
    resp = await client.get("/getLogs", data=log_request(spec, "main", Previous=True))
    assert resp.status == 400
    name = f"{spec['metadata']['namespace']}/{spec['metadata']['name']}"
    assert await resp.text() == f"Opts.Previous: pod {name} has no previous run"


async def test_logs_of_a_pod_not_deployed_yet_are_the_callers_mistake(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod whose ensemble the DMS has not taken yet has no logs to give: the kubelet answers
    that with a 400 ("waiting to start"); the gateway answered 500, its own failure. The pod's
    actor is held before it starts, so the pod waits to be deployed (the DMS would deploy it
    at once, before the logs were asked for when the loop ran the actor first)."""
    gate = ClosedTurns()  # no pod actor starts until it opens
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner="did:key:gw", clock=clock, turns=gate)
    try:
        spec = pod(uid(8), command=["sh", "-c", "sleep 60"])
        await create(gateway, spec)
        request = parse_logs_body(log_request(spec, "main").encode())
        with pytest.raises(PluginRequestError) as waiting:
            _ = [chunk async for chunk in gateway.logs(request)]
        name = f"{spec['metadata']['namespace']}/{spec['metadata']['name']}"
        assert str(waiting.value) == f"pod {name} is waiting to start: not deployed yet"
        assert not gateway.book.records[uid(8)].ensemble_id
    finally:
        gate.open.set()
        await gateway.close()
