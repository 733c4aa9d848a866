"""The gateway's grant from the DMS, near and past its end, on one injected clock.

The DMS drops, without a word, a message whose tokens do not verify — a token that outlives the
grant it is chained on, or one chained on a grant that has run out — and the gateway would wait
for its full timeout. These tests run a devnet node in memory on the gateway's own clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import dmsgw
from dmsgw.behaviors.catalog import get_behavior
from dmsgw.behaviors.node import (
    CapabilityExpiredError,
    NodeActor,
    grant_expiry,
    seconds_until_grant_expiry,
)
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.rest_api import DmsApi
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.trust import did_from_id, provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext, TokenList, save_context, unmarshal_token_list
from dmsgw.keys.ucan.token import format_ns
from dmsgw.transport.envelope import Address, Envelope, Handle
from dmsgw.transport.memory import MemoryTransport
from dmsgw.transport.rest import DMSTimeoutError
from dmsgw.transport.security import SecurityContext

KEY = Ed25519PrivKey(bytes(range(140, 172)))
GW_DID = DID.from_public_key(KEY.public_key())
START_NS = 1_750_000_000 * NS_PER_SECOND
HOUR = 3600.0


class CountingTransport(MemoryTransport):
    """Counts what reaches the DMS: a refused request must not."""

    sent = 0

    async def invoke(self, msg: Envelope) -> Envelope:
        self.sent += 1
        return await super().invoke(msg)


@dataclass
class Dms:
    devnet: Devnet
    clock: FixedClock
    transport: CountingTransport

    def grant(self, hours: float, caps: list[str], topics: list[str] | None = None) -> TokenList:
        return self.devnet.grant(GW_DID, caps, topics=topics or (), duration_s=hours * HOUR)

    def connect(self, context: CapabilityContext | str, cap_dir: Path | None = None) -> dmsgw.Node:
        return dmsgw.connect(
            key=KEY,
            context=context,
            cap_dir=cap_dir,
            transport=self.transport,
            loop=asyncio.get_running_loop(),
            clock=self.clock,
        )

    def context(self, provide: TokenList) -> CapabilityContext:
        return CapabilityContext(
            provider_from_private_key(KEY), name="gw", provide=provide, clock=self.clock
        )


@pytest.fixture
async def dms() -> AsyncIterator[Dms]:
    clock = FixedClock(START_NS)
    devnet = Devnet(1, seed="grant-expiry", clock=clock)  # nodes only, no REST server
    yield Dms(devnet, clock, CountingTransport(DmsApi(devnet.nodes[0].node, early_timeout=True)))


async def test_a_token_never_outlives_the_grant_it_is_chained_on(dms: Dms) -> None:
    """A grant with 10 s left and a request that may wait 30 s: the invoke token ends with the
    grant, so the DMS accepts it (one that outlived the grant would be dropped unheard)."""
    grant = dms.grant(10 / HOUR, ["/dms/node"])
    security = SecurityContext(KEY, dms.context(grant), clock=dms.clock)
    actor = NodeActor.start(security, dms.transport, clock=dms.clock)
    try:
        behavior = get_behavior("/dms/node/peers/self")
        request = await actor.proxy().prepare_invoke(behavior, timeout_s=30)
    finally:
        actor.stop()
        await actor.wait_stopped()
    assert request.opt.exp == START_NS + 30 * NS_PER_SECOND
    (chained,) = [
        t for t in unmarshal_token_list(request.cap or b"").present() if t.dms and t.dms.chain
    ]
    assert chained.expire() == START_NS + 10 * NS_PER_SECOND
    chained.verify(dms.clock())  # raises if it outlived its chain
    node = dms.connect(dms.context(grant))
    try:
        assert (await node.peers.self()).id == dms.devnet.nodes[0].node.peer_id
    finally:
        await node.aclose()


async def test_a_broadcast_token_never_outlives_its_grant_either(dms: Dms) -> None:
    grant = dms.grant(10 / HOUR, ["/broadcast"], topics=["/nunet"])
    node = dms.connect(dms.context(grant))
    try:
        replies = await node.broadcast.hello(timeout=30)
    finally:
        await node.aclose()
    assert [r.did for r in replies] == [dms.devnet.nodes[0].node.did]


async def test_a_request_on_a_grant_that_ran_out_is_refused_before_it_is_sent(dms: Dms) -> None:
    grant = dms.grant(1, ["/dms/node"])
    node = dms.connect(dms.context(grant))
    try:
        await node.peers.self()
        sent = dms.transport.sent
        dms.clock.advance(HOUR + 1)
        with pytest.raises(CapabilityExpiredError) as info:
            await node.peers.self()
    finally:
        await node.aclose()
    assert dms.transport.sent == sent  # nothing reached the DMS
    message = str(info.value)
    issuer = dms.devnet.nodes[0].node.did.uri
    assert f"ran out at {format_ns(START_NS + int(HOUR * NS_PER_SECOND))}" in message
    assert f"delegate token from {issuer} to {GW_DID.uri} for [/dms/node]" in message
    assert f"nunet cap grant --context dms --cap /dms/node --duration 8760h {GW_DID.uri}" in message
    assert "dmsgw cap anchor --context gw --provide '<token list>'" in message
    assert f"dmsgw devnet grant --cap /dms/node --anchor gw {GW_DID.uri}" in message


async def test_a_grant_that_ran_out_before_the_context_file_loaded_is_named(
    dms: Dms, tmp_path: Path
) -> None:
    """Loading a context drops the anchors that ran out (as the DMS does); the gateway still
    knows them, to say which grant to renew instead of sending what the DMS would drop."""
    save_context(dms.context(dms.grant(1, ["/dms/node/peers"])), directory=tmp_path)
    dms.clock.advance(2 * HOUR)
    node = dms.connect("gw", cap_dir=tmp_path)
    try:
        with pytest.raises(CapabilityExpiredError, match=r"for \[/dms/node/peers\]\)"):
            await node.peers.self()
    finally:
        await node.aclose()
    assert dms.transport.sent == 0


async def test_the_log_warns_a_week_a_day_and_an_hour_ahead_once_each(
    dms: Dms, caplog: pytest.LogCaptureFixture
) -> None:
    node = dms.connect(dms.context(dms.grant(30, ["/dms/node"])))

    async def calls(n: int) -> None:
        for _ in range(n):
            await node.peers.self()
            dms.clock.advance(700)  # past the cached token's life: each call signs anew

    try:
        with caplog.at_level(logging.WARNING, logger="dmsgw.behaviors.node"):
            await calls(3)
            dms.clock.advance(7 * HOUR)  # 22 h 25 min left
            await calls(3)
            dms.clock.advance(21 * HOUR)  # 50 min left
            await calls(3)
    finally:
        await node.aclose()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings
    assert [w.split(", in ")[1].split(" (")[0] for w in warnings] == ["30 h", "22 h", "50 min"]
    assert all("renew it: on a DMS, its operator runs `nunet cap grant" in w for w in warnings)


async def test_the_grant_gauge_counts_down_on_the_clock(dms: Dms) -> None:
    ctx = dms.context(dms.grant(30, ["/dms/node"]))
    assert seconds_until_grant_expiry(ctx, dms.clock) == 30 * HOUR
    dms.clock.advance(31 * HOUR)
    assert grant_expiry(ctx) == START_NS + int(30 * HOUR * NS_PER_SECOND)  # kept once it lapsed
    assert seconds_until_grant_expiry(ctx, dms.clock) == -HOUR
    ungranted = CapabilityContext(provider_from_private_key(KEY), clock=dms.clock)
    assert math.isnan(seconds_until_grant_expiry(ungranted, dms.clock))


async def test_a_timeout_hint_names_grants_that_ran_out_rather_than_none(dms: Dms) -> None:
    """A request no grant ever covered still goes out (the DMS may trust the gateway as a
    root); when it is refused, the hint says what the gateway held and that it ran out."""
    node = dms.connect(dms.context(dms.grant(1, ["/dms/node/resources"])))
    dms.clock.advance(2 * HOUR)
    try:
        with pytest.raises(DMSTimeoutError, match="holds only grants that ran out") as info:
            await node.peers.self()
    finally:
        await node.aclose()
    assert "for [/dms/node/resources] at 2025-06-15T16:06:40Z" in str(info.value)


def test_only_sound_grants_count_as_lapsed(dms: Dms) -> None:
    """Kept past its end only what held until then: not a revoked grant, nor one removed."""
    issuer = dms.devnet.nodes[0].node.capabilities
    kept, revoked, removed = (dms.grant(1, [f"/dms/node/{n}"]) for n in ("a", "b", "c"))
    ctx = dms.context(TokenList.of([*kept.present(), *revoked.present(), *removed.present()]))
    ctx.add_roots(revoke=TokenList.of([issuer.revoke(revoked.present()[0])]))
    ctx.remove_roots(provide=removed)
    assert ctx.lapsed_anchors().present() == ()
    dms.clock.advance(2 * HOUR)
    assert ctx.lapsed_anchors().present() == kept.present()


async def test_each_actor_of_one_did_gets_a_token_for_its_own_id(dms: Dms) -> None:
    """The DMS's child actors share their node's DID but each has an ID of its own, and an
    invoke token is addressed to the ID: one cached for one actor must not go to another."""
    grant = dms.grant(24, ["/dms/node"])
    security = SecurityContext(KEY, dms.context(grant), clock=dms.clock)
    actor = NodeActor.start(security, dms.transport, clock=dms.clock)
    node = dms.devnet.nodes[0].node
    ids = [ID.from_public_key(Ed25519PrivKey(bytes([n]) * 32).public_key()) for n in (1, 2)]
    targets = [Handle(i, node.did, Address(node.peer_id, "child")) for i in ids]
    try:
        behavior = get_behavior("/dms/node/peers/self")
        requests = [await actor.proxy().prepare_invoke(behavior, to=t) for t in targets]
    finally:
        actor.stop()
        await actor.wait_stopped()
    audiences = [
        {t.audience() for t in unmarshal_token_list(r.cap or b"").present() if t.dms}
        for r in requests
    ]
    assert audiences == [{did_from_id(i)} for i in ids]
