"""interLink's poll of a live pod, nearly every request the gateway gets, is answered from the
pod's kept ``/status`` entry: the same bytes the long way answers, without reading the body or
the entry again; and a pod keeps its entry as JSON, not as a model.

Over the in-memory DMS of :mod:`tests.support.gateway_fakes` and the real plugin routes on loopback.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.actors.turns import PER_TURN
from dmsgw.clock import FixedClock
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.records.pod_record import Phase
from dmsgw.interlink.server import Metrics, PluginServer, routes
from dmsgw.interlink.wire import k8s, parsing
from dmsgw.interlink.wire.bodies import PodStatus
from tests.support.gateway_fakes import FakeDMS, create, gateway_on, pod, uid, until

OWNER = "did:key:the-gateway"
Plugin = tuple[TestClient[Any, Any], Gateway, list[int]]


@pytest.fixture(autouse=True)
def no_body_read_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bodies other tests polled are not remembered here."""
    fresh = parsing._BodyMemo(max_entries=parsing.MEMO_ENTRIES, max_bytes=parsing.MEMO_BYTES)
    monkeypatch.setattr(parsing, "_VALID_STATUS_BODIES", fresh)


@pytest.fixture
async def plugin(tmp_path: Path, clock: FixedClock) -> AsyncIterator[Plugin]:
    """The plugin routes over a gateway; the list counts the pods its long way answered."""
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    long_way: list[int] = []
    status = gateway.status

    async def counting(pods: Any) -> Any:
        long_way.append(len(pods))
        return await status(pods)

    gateway.status = counting  # type: ignore[method-assign]
    config = load_config(
        env={"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "unused.sqlite3")}
    )
    server = PluginServer(gateway, config.server_options(), Metrics())
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"),
        headers={"Content-Type": "application/json"},
    )
    await client.start_server()
    try:
        yield client, gateway, long_way
    finally:
        await client.close()
        await gateway.close()


async def _running(gateway: Gateway, *numbers: int) -> None:
    for n in numbers:
        await create(gateway, pod(uid(n)))
    await until(
        lambda: all(
            uid(n) in gateway.book.snapshots
            and gateway.book.snapshots[uid(n)].containers[0].state.running
            for n in numbers
        ),
        "running",
    )


async def _poll(client: TestClient[Any, Any], *numbers: int) -> bytes:
    resp = await client.get("/status", data=json.dumps([pod(uid(n)) for n in numbers]))
    assert resp.status == 200, await resp.text()
    return await resp.read()


async def test_a_known_pods_poll_is_answered_from_its_kept_entry(
    plugin: Plugin, clock: FixedClock
) -> None:
    """The first poll of a body reads it for the pods it names, and answers from their kept
    entries as the next ones do, without reading the body again: the same bytes, and they
    still count as interLink naming the pods (the orphan collection reads that)."""
    client, gateway, long_way = plugin
    await _running(gateway, 1, 2)
    first = await _poll(client, 1, 2)
    clock.advance(30.0)
    again = [await _poll(client, 1, 2) for _ in range(3)]
    assert long_way == []
    assert again == [first] * 3
    assert [s["UID"] for s in json.loads(first)] == [uid(1), uid(2)]
    assert gateway.book.polls.last_named_ns(uid(1)) == clock()


async def test_a_body_naming_a_pod_without_an_entry_goes_the_long_way(plugin: Plugin) -> None:
    """A pod the gateway does not have (deleted, or never created) is the long way's to
    answer, re-adoption included, even in a body read before."""
    client, gateway, long_way = plugin
    await _running(gateway, 1)
    await _poll(client, 1, 7)
    await _poll(client, 1, 7)
    await _poll(client, 1)
    await _poll(client, 1)
    await gateway.delete(k8s.Pod.model_validate(pod(uid(1))))
    await until(lambda: uid(1) not in gateway.book.snapshots, "deleted")
    (gone,) = json.loads(await _poll(client, 1))
    assert long_way == [2, 2, 1]
    assert gone["containers"][0]["state"]["terminated"]["reason"]


async def test_a_body_of_many_pods_goes_the_long_way(
    plugin: Plugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body of more pods than are answered at once gives the event loop its turns."""
    client, gateway, long_way = plugin
    monkeypatch.setattr(routes, "AT_ONCE_MAX_PODS", 1)
    await _running(gateway, 1, 2)
    await _poll(client, 1, 2)
    await _poll(client, 1, 2)
    await _poll(client, 1)
    await _poll(client, 1)
    assert long_way == [2, 2]


async def test_a_pod_keeps_its_entry_as_json_not_as_a_model(
    tmp_path: Path, clock: FixedClock
) -> None:
    """A ``PodStatus`` model is ~4.8 KiB, a quarter of what a pod held: none is kept per pod
    (each one made is read as JSON and dropped)."""
    dms = FakeDMS(tmp_path / "logs")
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock)
    try:
        gc.collect()
        before = _models()
        await _running(gateway, *range(1, 21))
        await until(
            lambda: all(gateway.book.records[uid(n)].phase == Phase.RUNNING for n in range(1, 21)),
            "followed",
        )
        gc.collect()
        assert _models() - before == 0
    finally:
        await gateway.close()


def _models() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, PodStatus))


async def test_bodies_never_seen_before_are_read_a_few_per_turn(
    turn: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of interLink's connections may bring a body the gateway has not read (after a
    restart of either): validating one is heavy, so bodies that arrive together are read a
    few per turn of the loop, not all in one (64 at once held the loop 20 ms)."""
    read_in: list[int] = []
    validate = parsing._named

    def counted(item: Any, index: int) -> Any:
        read_in.append(turn())
        return validate(item, index)

    monkeypatch.setattr(parsing, "_named", counted)
    uids = [uid(i) for i in range(3 * PER_TURN)]
    bodies = [json.dumps([pod(u)]).encode() for u in uids]
    read = await asyncio.gather(*(parsing.read_status_body(raw) for raw in bodies))
    assert [refs[0].uid for refs in read] == uids
    assert max(collections.Counter(read_in).values()) == PER_TURN
    again = await asyncio.gather(*(parsing.read_status_body(raw) for raw in bodies))
    assert len(read_in) == 3 * PER_TURN and len(again) == 3 * PER_TURN  # remembered: not read


async def test_what_a_status_answer_does_not_read_is_checked_only_for_a_pod_read_whole(
    plugin: Plugin,
) -> None:
    """A known pod is answered from its kept entry, whatever its body's spec or status say;
    an unknown one is read whole (to re-adopt it), so the same fault there is a 400 naming
    the field, at every poll."""
    client, gateway, long_way = plugin
    await _running(gateway, 1)
    (kept,) = json.loads(await _poll(client, 1))
    known, unknown = pod(uid(1)), pod(uid(7))
    for body in (known, unknown):
        body["status"] = {"phase": "Done"}
    for _ in range(2):
        resp = await client.get("/status", data=json.dumps([known]))
        assert resp.status == 200 and await resp.json() == [kept]
        resp = await client.get("/status", data=json.dumps([unknown]))
        assert resp.status == 400
        assert (await resp.text()).startswith("[0].status.phase: input should be 'Pending'")
    assert long_way == [1, 1]
