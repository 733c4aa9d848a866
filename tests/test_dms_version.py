"""The DMS's version: learned from what it answers, logged, on ``/metrics``, learned again
after the DMS was unreachable, and a DMS whose wire the gateway does not speak refused; the
catalog of each version, in the REPL and the CLI too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

import dmsgw
from dmsgw.behaviors import catalog
from dmsgw.behaviors.cap_anchors import CapTokenAnchorRequest
from dmsgw.behaviors.catalog import (
    DMS_V05,
    DMS_V06,
    BehaviorNotInVersionError,
    catalog_for,
    get_behavior,
    require_in_version,
)
from dmsgw.behaviors.deployment import DeploymentInfoResponse
from dmsgw.behaviors.dms_version import PROBE_ID, UnsupportedDmsError, learn_dms_version
from dmsgw.behaviors.node import DMSBehaviorError
from dmsgw.behaviors.onboarding import OnboardStatusResponse
from dmsgw.behaviors.peers import PeerAddrInfoResponse
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.rest_api import DmsApi
from dmsgw.interlink.app import DmsConnection, _dms_info, _show_version
from dmsgw.interlink.server import Metrics
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.token import TokenList
from dmsgw.transport.memory import MemoryTransport
from dmsgw.transport.rest import DMSTimeoutError, TransportError

KEY = Ed25519PrivKey(bytes(range(70, 102)))


class FakeDMS:
    """Answers as a DMS of ``version`` would: ``"v0.5"`` has no ``deployment/info``, anything
    else unknown answers nothing; ``down`` makes it unreachable."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.down = False
        self.asked: list[str] = []

    async def invoke(
        self, behavior: Any, payload: Any = None, *, to: Any = None, timeout_s: Any = None
    ) -> Any:
        self.asked.append(behavior.name)
        if self.down:
            raise TransportError(f"{behavior.name}: cannot reach the DMS at fake")
        if self.version not in (DMS_V05, DMS_V06):
            raise DMSTimeoutError(behavior.name)
        if behavior.name == "/dms/node/onboarding/status":
            return OnboardStatusResponse(onboarded=True)
        if behavior.name == "/dms/node/deployment/info":
            if self.version == DMS_V05:
                raise DMSTimeoutError(behavior.name)  # no such behavior: dropped, 408
            assert payload.id == PROBE_ID
            reply = DeploymentInfoResponse(error="failed to get deployment: not found")
            raise DMSBehaviorError(behavior.name, reply.error, reply)
        return PeerAddrInfoResponse(id="peer")


def connection(fake: FakeDMS) -> DmsConnection:
    return DmsConnection(fake, where="http://dms.test")  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [DMS_V05, DMS_V06])
async def test_the_version_is_read_from_what_the_dms_answers(version: str) -> None:
    assert await learn_dms_version(FakeDMS(version).invoke, "http://dms.test") == version


async def test_a_dms_that_answers_nothing_known_is_refused_naming_what_was_seen() -> None:
    with pytest.raises(UnsupportedDmsError) as info:
        await learn_dms_version(FakeDMS("v0.4").invoke, "http://dms.test")
    message = str(info.value)
    assert "the DMS at http://dms.test does not speak a wire this gateway knows" in message
    assert "/dms/node/onboarding/status" in message and "no reply" in message
    assert "This gateway speaks DMS v0.5, DMS v0.6" in message


async def test_the_gateway_logs_the_version_and_shows_it_on_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics(process=False)
    dms = connection(FakeDMS(DMS_V06))
    dms.on_version = lambda v: _show_version(_dms_info(metrics), v)
    with caplog.at_level(logging.INFO, logger="dmsgw.interlink.app"):
        assert await dms.learn_version() == DMS_V06
    assert "the DMS at http://dms.test is DMS v0.6" in caplog.text
    assert 'dmsgw_dms_info{version="v0.6"} 1.0' in metrics.render().decode()


async def test_after_the_dms_was_unreachable_its_version_is_learned_again() -> None:
    metrics = Metrics(process=False)
    fake = FakeDMS(DMS_V06)
    dms = connection(fake)
    dms.on_version = lambda v: _show_version(_dms_info(metrics), v)
    await dms.learn_version()
    peers_self = get_behavior("/dms/node/peers/self")
    fake.down = True
    with pytest.raises(TransportError, match="cannot reach"):
        await dms.invoke(peers_self)
    fake.down, fake.version, fake.asked = False, DMS_V05, []
    assert (await dms.invoke(peers_self)).id == "peer"  # came back as v0.5: learned first
    assert fake.asked[-1] == "/dms/node/peers/self" and "/dms/node/onboarding/status" in fake.asked
    assert dms.version == DMS_V05
    shown = metrics.render().decode()
    assert 'dmsgw_dms_info{version="v0.5"} 1.0' in shown and 'version="v0.6"' not in shown
    fake.asked = []
    await dms.invoke(peers_self)
    assert fake.asked == ["/dms/node/peers/self"]  # once reachable, not asked again


async def test_a_behavior_the_dms_version_lacks_is_refused_before_it_is_sent() -> None:
    fake = FakeDMS(DMS_V05)
    dms = connection(fake)
    await dms.learn_version()
    fake.asked = []
    with pytest.raises(BehaviorNotInVersionError, match=r"not a behavior of DMS v0\.5"):
        await dms.invoke(get_behavior("/dms/cap/provide/anchor"))
    assert fake.asked == []


def test_each_version_has_its_own_capability_anchors() -> None:
    old, new = catalog_for(DMS_V05), catalog_for(DMS_V06)
    assert "/dms/cap/anchor" in old and "/dms/cap/anchor" not in new
    for name in ("/dms/cap/provide/anchor", "/dms/cap/require/anchor", "/dms/cap/revoke/anchor"):
        assert name in new and name not in old
    assert "/dms/cap/revoke/broadcast" in new and "/dms/node/deployment/info" in new
    shared = set(old) & set(new)
    assert {"/dms/node/deployment/new", "/dms/debug/flightrec", "/dms/node/subnet/join"} <= shared
    assert set(old) | set(new) == set(catalog.CATALOG)
    with pytest.raises(BehaviorNotInVersionError, match=r"only DMS v0\.5 has it"):
        require_in_version(get_behavior("/dms/cap/anchor"), DMS_V06)


def test_the_newest_behaviors_are_in_the_catalog() -> None:
    for name in (
        "/dms/debug/flightrec",
        "/dms/cap/revoke/broadcast",
        "/dms/node/subnet/create",
        "/dms/node/subnet/destroy",
        "/dms/node/subnet/join",
        "/dms/tokenomics/contract/create",
        "/dms/tokenomics/contract/state",
        "/dms/tokenomics/contract/list_incoming",
        "/dms/tokenomics/contract/approve_local",
        "/dms/tokenomics/contract/terminate",
        "/dms/tokenomics/contract/complete",
        "/dms/tokenomics/contract/settle",
        "/dms/tokenomics/contract/validate",
        "/dms/tokenomics/contract/payment/status",
        "/dms/tokenomics/contract/usages/calculate",
        "/dms/tokenomics/contract/transactions/list",
        "/dms/tokenomics/contract/transactions/confirm",
    ):
        assert name in catalog.CATALOG
    settle = get_behavior("/dms/tokenomics/contract/settle")
    assert settle.encode_request(settle.request(contract_did="did:key:z1")) == (  # type: ignore[misc]
        b'{"contract_did":"did:key:z1"}'
    )


@contextlib.asynccontextmanager
async def started(devnet: Devnet) -> AsyncIterator[Devnet]:
    await devnet.start()
    try:
        yield devnet
    finally:
        await devnet.stop()


async def devnet_client(devnet: Devnet, version: str | None) -> dmsgw.Node:
    api = DmsApi(devnet.nodes[0].node, early_timeout=True)
    did = DID.from_public_key(KEY.public_key())
    grants = [
        devnet.grant(did, ["/dms"], topics=["/nunet"], node=i) for i in range(len(devnet.nodes))
    ]
    grant = TokenList.of([t for g in grants for t in g.present()])
    ctx = CapabilityContext(provider_from_private_key(KEY), provide=grant)
    return dmsgw.connect(
        key=KEY,
        context=ctx,
        transport=MemoryTransport(api),
        loop=asyncio.get_running_loop(),
        dms_version=version,
    )


async def test_the_devnet_is_the_newest_dms_and_the_repl_shows_its_catalog() -> None:
    async with (
        started(Devnet(2, seed="version-tests")) as devnet,
        await devnet_client(devnet, None) as dms,
    ):
        assert await dms.learn_version() == DMS_V06 == dms.dms_version
        assert hasattr(dms.cap, "provide_anchor") and not hasattr(dms.cap, "anchor")
        assert "revoke_broadcast" in dir(dms.cap)
        with pytest.raises(DMSBehaviorError, match="subnets are not supported by the devnet"):
            await dms.subnet.create({"SubnetID": "s1"})
        with pytest.raises(DMSBehaviorError, match="tokenomics is not supported"):
            await dms.contract.state({"contract_did": "did:key:z1"})
        assert (await dms.contract.list_incoming()).contracts == []


async def test_a_repl_on_a_v05_dms_shows_and_sends_the_v05_catalog() -> None:
    async with (
        started(Devnet(1, seed="version-tests-old")) as devnet,
        await devnet_client(devnet, DMS_V05) as dms,
    ):
        assert dms.dms_version == DMS_V05
        assert hasattr(dms.cap, "anchor") and not hasattr(dms.cap, "provide_anchor")
        with pytest.raises(BehaviorNotInVersionError, match="/dms/cap/provide/anchor"):
            await dms.invoke("/dms/cap/provide/anchor")


async def test_a_revocation_broadcast_is_anchored_by_every_devnet_node() -> None:
    devnet = Devnet(2, seed="version-tests-revoke")
    other = Ed25519PrivKey(bytes(range(1, 33)))
    given = devnet.grant(DID.from_public_key(other.public_key()), ["/dms/node"])
    revocation = devnet.nodes[0].node.capabilities.revoke(given.present()[0])
    assert not any(n.node.capabilities.list_roots()[3].present() for n in devnet.nodes)
    async with await devnet_client(devnet, None) as dms:
        replies = await dms.cap.revoke_broadcast(CapTokenAnchorRequest(TokenList.of([revocation])))
        assert [r.ok for r in replies] == [True, True]
    for n in devnet.nodes:
        assert n.node.capabilities.list_roots()[3].present() == (revocation,)


async def test_a_dms_unreachable_at_start_is_asked_its_version_on_the_first_call() -> None:
    """The gateway starts whether its DMS is up or not (as before it asked)."""
    fake = FakeDMS(DMS_V05)
    fake.down = True
    dms = connection(fake)
    await dms.learn_version_or_defer()
    assert dms.version is None
    fake.down = False
    assert (await dms.invoke(get_behavior("/dms/node/peers/self"))).id == "peer"
    assert dms.version == DMS_V05


async def test_a_dms_that_answers_but_not_our_wire_still_stops_the_start() -> None:
    with pytest.raises(UnsupportedDmsError):
        await connection(FakeDMS("v0.4")).learn_version_or_defer()
