"""The developer's client end to end: dmsgw.connect() against simulated DMS nodes over REST."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dmsgw
from dmsgw.behaviors.catalog import UnknownBehaviorError
from dmsgw.behaviors.deployment import DeploymentLogsResponse, DeploymentManifestResponse
from dmsgw.behaviors.node import DMSBehaviorError, NotGrantedError
from dmsgw.behaviors.peers import PeersListResponse
from dmsgw.behaviors.status import AllocationManifest, EnsembleManifest
from dmsgw.behaviors.typed_client import (
    AllocationLogs,
    ClientArgumentError,
    LogsUnreadableError,
    Pending,
    build_namespaces,
)
from dmsgw.clock import NS_PER_SECOND
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.devnet_files import devnet_record as state
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext, TokenList
from dmsgw.keys.ucan.store import save_context
from dmsgw.transport.envelope import Envelope
from dmsgw.transport.preflight import Stage
from dmsgw.transport.rest import DMSErrorKind, DMSTimeoutError, RestTransport

GW_KEY = Ed25519PrivKey(bytes(range(100, 132)))
GW_DID = DID.from_public_key(GW_KEY.public_key())


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(2, seed="client-tests", early_timeout=True))
    yield background.start()
    background.stop()


def _connect(devnet: Devnet, provide: TokenList | None, key: Ed25519PrivKey = GW_KEY) -> dmsgw.Node:
    ctx = CapabilityContext(provider_from_private_key(key), provide=provide)
    return dmsgw.connect(devnet.urls[0], key=key, context=ctx)


@pytest.fixture(scope="module")
def dms(devnet: Devnet) -> Iterator[dmsgw.Node]:
    grant = devnet.grant(GW_DID, ["/dms/node", "/public", "/broadcast"], topics=["/nunet"])
    node = _connect(devnet, grant)
    yield node
    node.close()


def test_typed_calls_return_results_in_plain_code(devnet: Devnet, dms: dmsgw.Node) -> None:
    peers = dms.peers.list()
    assert isinstance(peers, PeersListResponse)
    assert peers.peers == (devnet.nodes[1].node.peer_id,)
    assert dms.peers.self().id == devnet.nodes[0].node.peer_id
    assert dms.public.hello().did == devnet.nodes[0].node.did
    pong = dms.peers.ping(devnet.nodes[1].node.peer_id)
    assert pong.error == ""


def test_invoke_by_name_with_dict_and_json_payloads(devnet: Devnet, dms: dmsgw.Node) -> None:
    peer = devnet.nodes[1].node.peer_id
    assert dms.invoke("/dms/node/peers/ping", {"Host": peer}).error == ""
    assert dms.invoke("/dms/node/peers/ping", f'{{"Host":"{peer}"}}').error == ""


def test_a_reply_error_is_a_typed_error(dms: dmsgw.Node) -> None:
    with pytest.raises(DMSBehaviorError, match="/dms/node/peers/ping: the DMS answered: failed"):
        dms.peers.ping("12D3KooWnotapeer")


def test_invoking_another_peer_through_the_dms(devnet: Devnet, dms: dmsgw.Node) -> None:
    other = devnet.nodes[1].node
    assert dms.public.hello(to=other.peer_id).did == other.did
    assert dms.peers.self(to=other.did.uri).id == other.peer_id


def test_broadcast_collects_every_reply(devnet: Devnet, dms: dmsgw.Node) -> None:
    replies = dms.broadcast.hello(timeout=5)
    assert sorted(r.did.uri for r in replies) == sorted(n.node.did.uri for n in devnet.nodes)


async def test_calls_are_awaitable_where_a_loop_runs(devnet: Devnet, dms: dmsgw.Node) -> None:
    pending = dms.peers.list()
    assert isinstance(pending, Pending) and "use `await`" in repr(pending)
    assert (await pending).peers == (devnet.nodes[1].node.peer_id,)
    results = await asyncio.gather(*(dms.peers.self() for _ in range(20)))
    assert {r.id for r in results} == {devnet.nodes[0].node.peer_id}


def test_an_unauthorised_call_is_explained_by_the_preflight(devnet: Devnet) -> None:
    # Other keys than the granted gateway's: a DMS remembers the tokens it has consumed, so
    # the granted gateway stays authorized for a while even without presenting its grant.
    stranger = Ed25519PrivKey(bytes(range(7, 39)))
    with (
        _connect(devnet, None, stranger) as ungranted,
        pytest.raises(DMSTimeoutError, match="untrusted_issuer") as info,
    ):
        ungranted.peers.list()
    assert info.value.verdict is not None and not info.value.verdict.accepted
    assert info.value.kind is DMSErrorKind.REFUSED


def test_a_call_no_grant_covers_is_refused_before_it_is_sent(devnet: Devnet) -> None:
    narrower = Ed25519PrivKey(bytes(range(9, 41)))
    did = DID.from_public_key(narrower.public_key()).uri
    grant = devnet.grant(DID(did), ["/dms/node/resources"])
    node = devnet.nodes[0].node
    with _connect(devnet, grant, narrower) as narrow:
        seen = (len(node.dropped), node.handled)
        with pytest.raises(NotGrantedError) as info:
            narrow.peers.list(timeout=3600)  # refused at once: nothing waits for the hour
        assert (len(node.dropped), node.handled) == seen  # nothing reached the DMS
    assert str(info.value) == (
        "/dms/node/peers/list: not sent, the DMS would drop it: the capabilities delegated to "
        f"{did} ([/dms/node/resources]) — none covers /dms/node/peers/list\n"
        "  hint: the DMS operator grants it with `nunet cap grant --context dms "
        f"--cap /dms/node/peers/list --duration 8760h {did}`"
    )


def test_broadcast_replies_count_as_of_the_request_expiry(devnet: Devnet) -> None:
    """A DMS answers a broadcast once the request has expired, with the replies that came in
    before; each reply shares the request's expiry, so it must be checked as of then."""
    late: list[int] = []

    def clock() -> int:
        return late[0] if late else time.time_ns()

    class AnswersAtExpiry(RestTransport):
        async def broadcast(self, envelope: Envelope) -> list[Envelope]:
            replies = await super().broadcast(envelope)
            late.append(envelope.opt.exp + NS_PER_SECOND)  # the DMS answers after expiry
            return replies

    key = Ed25519PrivKey(bytes(range(13, 45)))
    grant = devnet.grant(DID.from_public_key(key.public_key()), ["/broadcast"], topics=["/nunet"])
    context = CapabilityContext(provider_from_private_key(key), provide=grant)
    transport = AnswersAtExpiry(devnet.urls[0])
    with dmsgw.connect(key=key, context=context, transport=transport, clock=clock) as dms:
        replies = dms.broadcast.hello(timeout=5)
    assert sorted(r.did.uri for r in replies) == sorted(n.node.did.uri for n in devnet.nodes)


def test_a_relayed_call_is_explained_by_the_receivers_rules(devnet: Devnet) -> None:
    """Through our DMS to another: the reply address is ours by construction, so a refusal is
    about the capability, never "reply address is not this DMS"."""
    stranger = Ed25519PrivKey(bytes(range(17, 49)))
    with (
        _connect(devnet, None, stranger) as ungranted,
        pytest.raises(DMSTimeoutError) as info,
    ):
        ungranted.public.hello(to=devnet.nodes[1].node.did.uri)
    assert info.value.verdict is not None and info.value.verdict.stage is Stage.CAPABILITY
    assert "reply address" not in str(info.value) and "untrusted_issuer" in str(info.value)


@pytest.fixture
def devnet_running(devnet: Devnet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Devnet:
    """The devnet, recorded as `dmsgw devnet up` records itself."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    state.record(devnet.seed, devnet.urls)
    return devnet


def test_on_a_devnet_the_refusal_names_the_devnet_grant(
    devnet_running: Devnet, tmp_path: Path
) -> None:
    key = Ed25519PrivKey(bytes(range(19, 51)))
    grant = devnet_running.grant(DID.from_public_key(key.public_key()), ["/dms/node"])
    caps = tmp_path / "cap"
    context = CapabilityContext(provider_from_private_key(key), name="gw", provide=grant)
    save_context(context, directory=caps)
    other = devnet_running.nodes[0].node.did.uri
    with dmsgw.connect(devnet_running.urls[1], key=key, context="gw", cap_dir=caps) as dms:
        with pytest.raises(NotGrantedError) as hello:
            dms.public.hello(to=other)
        with pytest.raises(NotGrantedError) as broadcast:
            dms.broadcast.hello()
    grant_cmd = "dmsgw devnet grant --seed client-tests --node 1"
    assert str(hello.value).endswith(
        "none covers /public/hello\n  hint: grant it on the devnet with "
        f"`{grant_cmd} --cap /public/hello --anchor gw --cap-dir {caps}`"
    )
    assert str(broadcast.value).endswith(
        "none covers /broadcast/hello on topic /nunet/hello\n  hint: grant it on the devnet with "
        f"`{grant_cmd} --cap /broadcast/hello --topic /nunet/hello --anchor gw --cap-dir {caps}`"
    )


def test_on_a_devnet_a_key_without_grants_is_refused_at_once(devnet_running: Devnet) -> None:
    """A devnet trusts a gateway only through a grant, so no grant at all is certain refusal."""
    key = Ed25519PrivKey(bytes(range(23, 55)))
    did = DID.from_public_key(key.public_key()).uri
    with _connect(devnet_running, None, key) as dms, pytest.raises(NotGrantedError) as info:
        dms.peers.list()
    assert str(info.value) == (
        f"/dms/node/peers/list: not sent, the DMS would drop it: {did} holds no delegated "
        "capability\n  hint: grant it on the devnet with `dmsgw devnet grant --seed client-tests "
        f"--node 0 --cap /dms/node/peers/list {did}` and add the token list it prints to your "
        "context"
    )


def test_bad_calls_fail_clearly_before_anything_is_sent(dms: dmsgw.Node) -> None:
    with pytest.raises(UnknownBehaviorError, match="/dms/node/peers/lst"):
        dms.invoke("/dms/node/peers/lst")
    with pytest.raises(ClientArgumentError, match="takes no arguments"):
        dms.peers.list("x")
    with pytest.raises(ClientArgumentError, match="no field 'hots'"):
        dms.peers.ping(hots="x")
    with pytest.raises(ClientArgumentError, match="not JSON"):
        dms.invoke("/dms/node/peers/ping", "{nope")
    with pytest.raises(ClientArgumentError, match="/dms/node/peers/list: the payload is not JSON"):
        dms.invoke("/dms/node/peers/list", "{bad")  # no arguments, but the mistake is the JSON
    with pytest.raises(ClientArgumentError, match=r"positive number of seconds, got -5$"):
        dms.peers.list(timeout=-5)
    with pytest.raises(ClientArgumentError, match=r"positive number of seconds, got 0$"):
        dms.invoke("/dms/node/peers/list", timeout=0)
    with pytest.raises(ClientArgumentError, match="a number of seconds, not 'soon'"):
        dms.deployment.logs("ens", "alloc", timeout="soon")
    with pytest.raises(ClientArgumentError, match="broadcast"):
        dms.broadcast.hello(to="x")


def test_namespaces_are_discoverable(dms: dmsgw.Node) -> None:
    assert {"peers", "deployment", "resources", "invoke", "did"} <= set(dir(dms))
    assert "list" in dir(dms.peers)
    assert "/dms/node/peers/list" in (dms.peers.list.__doc__ or "")
    assert repr(dms).startswith("<dmsgw.Node did:key:z6Mk")
    import inspect

    assert list(inspect.signature(dms.deployment.logs).parameters)[:2] == [
        "ensemble_id",
        "allocation_name",
    ]


class _Deployed:
    """An invoker with one deployment whose allocations are ``keys`` and whose logs the DMS
    wrote to ``written_to``."""

    def __init__(self, keys: tuple[str, ...], written_to: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.keys = keys
        self.written_to = written_to
        self.asked: list[str] = []

    async def invoke(self, behavior: Any, payload: Any, *, to: Any, timeout_s: Any) -> Any:
        if behavior.name == "/dms/node/deployment/manifest":
            allocations = {k: AllocationManifest() for k in self.keys}
            return DeploymentManifestResponse(manifest=EnsembleManifest(allocations=allocations))
        self.asked.append(payload.allocation_name)
        return DeploymentLogsResponse(logs_written_to=self.written_to)

    async def broadcast(self, behavior: Any, payload: Any, *, timeout_s: Any) -> list[Any]:
        raise AssertionError("no broadcast here")


async def test_logs_are_found_by_the_allocation_name_and_read_as_text(tmp_path: Path) -> None:
    (tmp_path / "stdout.log").write_text("hello\n")
    (tmp_path / "stderr.log").write_text("oops\n")
    invoker = _Deployed(("node1.alloc1", "node1.db"), str(tmp_path))
    logs = await build_namespaces(invoker)["deployment"].logs("ens-1", "alloc1")
    assert logs == AllocationLogs("node1.alloc1", "hello\n", "oops\n", str(tmp_path))
    assert str(logs) == "hello\noops\n"
    assert await build_namespaces(invoker)["deployment"].logs("ens-1", "node1.db")
    assert invoker.asked == ["node1.alloc1", "node1.db"]  # what the DMS was asked for


@pytest.mark.parametrize(
    ("keys", "name", "message"),
    [
        (
            ("n1.web", "n2.web"),
            "web",
            "ens-1: 'web' is on several nodes (n1.web, n2.web): name one",
        ),
        (("n1.web", "n2.web"), "job", "ens-1 has no allocation 'job' (it has: n1.web, n2.web)"),
        ((), "job", "ens-1 has no allocations yet: they exist once it is placed (Committing)"),
    ],
)
async def test_an_allocation_name_that_fits_no_single_one_is_refused(
    tmp_path: Path, keys: tuple[str, ...], name: str, message: str
) -> None:
    invoker = _Deployed(keys, str(tmp_path))
    with pytest.raises(ClientArgumentError) as info:
        await build_namespaces(invoker)["deployment"].logs("ens-1", name)
    assert str(info.value) == message and invoker.asked == []


async def test_logs_written_on_another_host_are_said_to_be_there(tmp_path: Path) -> None:
    elsewhere = str(tmp_path / "on-the-dms-host")
    invoker = _Deployed(("n1.web",), elsewhere)
    with pytest.raises(LogsUnreadableError) as info:
        await build_namespaces(invoker)["deployment"].logs("ens-1", "web")
    assert str(info.value) == (
        f"the DMS wrote the logs of n1.web to {elsewhere} on its host, which cannot be read here "
        "(No such file or directory): read them on the DMS host"
    )


async def test_a_log_file_the_dms_did_not_write_is_an_empty_output(tmp_path: Path) -> None:
    """``WriteAllocationLogs`` writes a file only for an output that is not empty: an
    allocation that wrote nothing on stderr has no ``stderr.log``."""
    (tmp_path / "stdout.log").write_text("hello\n")
    invoker = _Deployed(("n1.web",), str(tmp_path))
    logs = await build_namespaces(invoker)["deployment"].logs("ens-1", "web")
    assert (logs.stdout, logs.stderr) == ("hello\n", "")
