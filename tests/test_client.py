"""The developer's client end to end: dmsgw.connect() against simulated DMS nodes over REST."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import dmsgw
from dmsgw.actors.node import DMSBehaviorError, NotGrantedError
from dmsgw.behaviors.catalog import UnknownBehaviorError
from dmsgw.behaviors.client import ClientArgumentError, Pending
from dmsgw.behaviors.peers import PeersListResponse
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext, TokenList
from dmsgw.transport.rest import DMSTimeoutError

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


def test_bad_calls_fail_clearly_before_anything_is_sent(dms: dmsgw.Node) -> None:
    with pytest.raises(UnknownBehaviorError, match="/dms/node/peers/lst"):
        dms.invoke("/dms/node/peers/lst")
    with pytest.raises(ClientArgumentError, match="takes no arguments"):
        dms.peers.list("x")
    with pytest.raises(ClientArgumentError, match="no field 'hots'"):
        dms.peers.ping(hots="x")
    with pytest.raises(ClientArgumentError, match="not JSON"):
        dms.invoke("/dms/node/peers/ping", "{nope")
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
