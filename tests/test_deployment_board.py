"""Following many pods costs one ``deployment/list`` a period, not a status round trip per pod
(decision 79): settled follows park on the gateway's board, and only the deployments the
listing shows changed are asked about."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmsgw.behaviors.deployment import (
    DeploymentInfo,
    DeploymentListResponse,
    DeploymentManifestResponse,
    DeploymentStatusResponse,
    RecentPages,
)
from dmsgw.behaviors.status import EnsembleManifest
from dmsgw.clock import FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.pods.deployment_board import SLICE, DeploymentBoard, Listed
from dmsgw.interlink.pods.pod_follower import STARTING_WAIT_S, PodFollower
from dmsgw.interlink.records.pod_record import POD_UID_KEY, PodPolicy
from dmsgw.interlink.wire import k8s
from dmsgw.transport.rest import TransportError
from tests.support.gateway_fakes import (
    FakeDMS,
    create,
    gateway_on,
    pod,
    pod_services,
    uid,
    until,
)

PODS = 12


async def _settled_gateway(tmp_path: Path, dms: FakeDMS) -> Gateway:
    """A gateway whose ``PODS`` pods run and whose follows have all parked on its board with
    what a listing showed of their deployments."""
    gateway = await gateway_on(
        dms, tmp_path / "state", owner="did:key:z6Mkboard", clock=FixedClock(1)
    )
    for n in range(PODS):
        await create(gateway, pod(uid(n), command=["sleep", "1000"]))
    await until(lambda: gateway.board.parked == PODS, "every follow parked on the board")
    # Parked before any listing: each is told what the next shows, asks once, parks again.
    await gateway.board.list_once()
    await until(lambda: gateway.board.parked == PODS, "every follow parked again")
    return gateway


async def test_one_list_call_serves_every_settled_pod(tmp_path: Path) -> None:
    dms = FakeDMS(tmp_path / "logs")
    gateway = await _settled_gateway(tmp_path, dms)
    try:
        status_before, lists_before = dms.asked["deployment/status"], dms.asked["deployment/list"]
        for _ in range(3):
            await gateway.board.list_once()
        await asyncio.sleep(0)
        assert dms.asked["deployment/list"] >= lists_before + 3
        assert dms.asked["deployment/status"] == status_before  # no pod asked on its own
        assert gateway.board.parked == PODS
    finally:
        await gateway.close()


async def test_a_changed_deployment_is_asked_about_and_an_unchanged_one_is_not(
    tmp_path: Path,
) -> None:
    dms = FakeDMS(tmp_path / "logs")
    gateway = await _settled_gateway(tmp_path, dms)
    try:
        changed, *unchanged = sorted(dms.deployments)
        before = dict(dms.asked_about)
        dms.deployments[changed].status = "Failed"  # what the next listing shows
        await gateway.board.list_once()
        await until(lambda: dms.asked_about[changed] > before[changed], "the changed one asked")
        assert {e: dms.asked_about[e] for e in unchanged} == {e: before[e] for e in unchanged}
        pod_uid = dms.deployments[changed].metadata[POD_UID_KEY]
        await until(
            lambda: any(r.uid == pod_uid and r.dms_status == "Failed" for r, _ in gateway.pods()),
            "the pod saw its deployment fail",
        )
    finally:
        await gateway.close()


async def test_a_deployment_the_listing_no_longer_shows_is_asked_about(tmp_path: Path) -> None:
    dms = FakeDMS(tmp_path / "logs")
    gateway = await _settled_gateway(tmp_path, dms)
    try:
        gone = sorted(dms.deployments)[0]
        before = dms.asked_about[gone]
        dms.forget(gone)
        await gateway.board.list_once()
        await until(lambda: dms.asked_about[gone] > before, "the vanished one asked")
    finally:
        await gateway.close()


class _Follow:
    def __init__(self) -> None:
        self.heard: list[Listed | None] = []

    def woken(self, listed: Listed | None) -> None:
        self.heard.append(listed)


class _Pages:
    """A DMS listing ``ids`` two a page (``fail``: it does not answer)."""

    def __init__(self, ids: dict[str, str], *, per_page: int = 2) -> None:
        self.ids = ids
        self.per_page = per_page
        self.fail = False
        self.calls = 0

    async def __call__(self, behavior: Any, request: Any, **_: Any) -> DeploymentListResponse:
        self.calls += 1
        if self.fail:
            raise TransportError("connection refused")
        ids, n = sorted(self.ids), self.per_page
        page = ids[request.offset : request.offset + n]
        more = request.offset + n < len(ids)
        reply = DeploymentListResponse(
            deployments=tuple(DeploymentInfo(orchestrator_id=i, status=self.ids[i]) for i in page),
            total=len(ids),
            has_more=more,
            next_offset=request.offset + n if more else 0,
        )
        return DeploymentListResponse.from_json(reply.to_json())  # as the client decodes it


async def test_the_board_reads_every_page_and_wakes_only_what_changed() -> None:
    dms = _Pages({f"e{n}": "Running" for n in range(5)})
    board = DeploymentBoard(dms, "owner", every_s=lambda: 0.0)
    follows = {f"e{n}": _Follow() for n in range(5)}
    for ident, follow in follows.items():
        board.park(ident, None, follow)  # parked without a listing: told at the next
    await board.list_once()
    assert dms.calls == 3  # three pages of two
    assert all(f.heard == [("Running", "0001-01-01T00:00:00Z")] for f in follows.values())
    for ident, follow in follows.items():
        board.park(ident, follow.heard[-1], follow)
    dms.ids["e4"] = "Completed"
    del dms.ids["e0"]
    await board.list_once()
    assert {i: len(f.heard) for i, f in follows.items()} == {
        "e0": 2,
        "e1": 1,
        "e2": 1,
        "e3": 1,
        "e4": 2,
    }
    assert follows["e0"].heard[-1] is None
    assert follows["e4"].heard[-1] == ("Completed", "0001-01-01T00:00:00Z")
    assert board.parked == 3


def test_a_page_decoded_from_the_same_bytes_is_the_same_reply() -> None:
    page = DeploymentListResponse(
        deployments=(DeploymentInfo(orchestrator_id="e1", status="Running"),), total=1
    )
    data = page.to_json()
    first = DeploymentListResponse.from_json(data)
    assert DeploymentListResponse.from_json(bytes(bytearray(data))) is first  # other bytes, same
    other = DeploymentListResponse.from_json(data.replace(b"Running", b"Failed!"))
    assert other is not first and other.deployments is not None
    assert other.deployments[0].status == "Failed!"


def test_recent_pages_forget_the_least_recent_beyond_their_budget() -> None:
    recent = RecentPages(budget=10, pages=2)
    replies = [DeploymentListResponse(total=n) for n in range(4)]
    recent.put(b"aaaa", replies[0])
    recent.put(b"bbbb", replies[1])
    assert recent.get(b"aaaa") is replies[0]  # now the most recent
    recent.put(b"cccc", replies[2])  # three pages: b"bbbb", the least recent, goes
    assert (recent.get(b"bbbb"), recent.get(b"aaaa")) == (None, replies[0])
    recent.put(b"ddddddddddd", replies[3])  # more than the whole budget: not kept
    assert recent.get(b"ddddddddddd") is None
    recent.put(b"eeeeeeee", replies[3])  # 8 bytes: the 12 held go over 10, so both others go
    assert (recent.get(b"aaaa"), recent.get(b"cccc"), recent.get(b"eeeeeeee")) == (
        None,
        None,
        replies[3],
    )


async def test_an_unchanged_listing_checks_only_the_follows_parked_since() -> None:
    dms = _Pages({f"e{n}": "Running" for n in range(6)})
    board = DeploymentBoard(dms, "owner", every_s=lambda: 0.0)
    follows = {f"e{n}": _Follow() for n in range(6)}
    for ident, follow in follows.items():
        board.park(ident, None, follow)
    await board.list_once()  # the first listing: every follow checked, and told
    for ident, follow in follows.items():
        board.park(ident, follow.heard[-1], follow)
    await board.list_once()  # the same pages: only the six parked since are checked
    assert board.checked == 12
    for _ in range(3):
        await board.list_once()
    assert board.checked == 12  # nothing changed and none parked since: no follow checked
    board.park("e5", follows["e5"].heard[-1], follows["e5"])  # woken, polled, parked again
    await board.list_once()
    assert board.checked == 13
    dms.ids["e3"] = "Failed"  # the second page changes: every parked follow is checked
    await board.list_once()
    assert board.checked == 19
    assert {i: len(f.heard) for i, f in follows.items() if len(f.heard) > 1} == {"e3": 2}


async def test_a_big_listing_is_checked_a_slice_at_a_time(turn: Callable[[], int]) -> None:
    ids = {f"e{n:05}": "Running" for n in range(2 * SLICE + 1)}
    dms = _Pages(ids, per_page=len(ids))  # one page, from a DMS in this process
    board = DeploymentBoard(dms, "owner", every_s=lambda: 0.0)
    for ident in ids:
        board.park(ident, ("Running", "0001-01-01T00:00:00Z"), _Follow())
    await asyncio.sleep(0)
    before = turn()
    await board.list_once()
    assert board.checked == len(ids)
    assert turn() - before >= 2  # the loop turned between the slices


async def test_an_unanswered_listing_wakes_none_and_an_unparked_follow_is_not_woken() -> None:
    dms = _Pages({"e1": "Running", "e2": "Running"})
    board = DeploymentBoard(dms, "", every_s=lambda: 0.0)
    one, two = _Follow(), _Follow()
    board.park("e1", ("Failed", ""), one)
    board.park("e2", ("Failed", ""), two)
    dms.fail = True
    await board.list_once()
    assert (one.heard, two.heard, board.parked) == ([], [], 2)
    board.unpark("e2", one)  # not the follow parked for e2: stays
    assert board.parked == 2
    board.unpark("e2", two)
    dms.fail = False
    await board.list_once()
    assert (len(one.heard), two.heard, board.parked) == (1, [], 0)


async def test_a_parked_pod_deleted_leaves_the_board_and_its_ensemble_is_shut_down(
    tmp_path: Path,
) -> None:
    dms = FakeDMS(tmp_path / "logs")
    gateway = await _settled_gateway(tmp_path, dms)
    try:
        await gateway.delete(k8s.Pod.model_validate(pod(uid(0), command=["sleep", "1000"])))
        await until(lambda: gateway.board.parked == PODS - 1, "the deleted pod's follow unparked")
        await until(lambda: not dms.live(uid(0)), "its ensemble shut down")
        assert len(dms.live()) == PODS - 1
    finally:
        await gateway.close()


class _Provisioning:
    """A DMS whose deployment is still provisioning, poll after poll, until ``status`` says
    otherwise; its listing shows the same."""

    def __init__(self) -> None:
        self.status = "Provisioning"
        self.polls = 0

    async def __call__(self, behavior: Any, payload: Any = None, **_: Any) -> Any:
        if behavior.name.endswith("/list"):
            info = DeploymentInfo(orchestrator_id="ens-1", status=self.status)
            return DeploymentListResponse(deployments=(info,), total=1)
        if behavior.name.endswith("/manifest"):
            return DeploymentManifestResponse(manifest=EnsembleManifest())
        self.polls += 1
        return DeploymentStatusResponse(status=self.status)


def _starting_follower(dms: _Provisioning, board: DeploymentBoard | None) -> PodFollower:
    record_uid = uid(7)
    body = json.dumps({"pod": pod(record_uid), "container": [{"name": "main"}]}).encode()
    # the policy's defaults: 0.5 s growing to 5 s once running
    services = pod_services(dms, rng=random.Random(1), board=board)
    return PodFollower(record_uid, body, services, report=lambda _: None)


async def test_alone_a_deployment_on_its_way_to_running_is_polled_at_least_every_second() -> None:
    follower = _starting_follower(_Provisioning(), None)
    f = follower.following("ens-1", {})
    waits = [await follower.poll(f) for _ in range(8)]
    assert waits[0] == PodPolicy().poll_min_s
    assert max(w for w in waits if w is not None) == STARTING_WAIT_S  # not the running 5 s


async def test_deployments_on_their_way_to_running_park_and_are_woken_when_they_run() -> None:
    dms = _Provisioning()
    board = DeploymentBoard(dms, "", every_s=lambda: 0.0)
    follower = _starting_follower(dms, board)
    steps = follower.follow("ens-1", {})
    await until(lambda: board.parked == 1, "the starting follow parked")
    assert dms.polls == 1
    for _ in range(3):
        await board.list_once()  # still provisioning: not woken
    assert (dms.polls, board.parked) == (1, 1)
    dms.status = "Running"
    await board.list_once()
    await until(lambda: dms.polls == 2, "the follow woken to poll")
    steps.cancel()
