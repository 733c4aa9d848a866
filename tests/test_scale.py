"""What the gateway keeps so that 100,000 pods and a large DMS network cost little per request,
and that what it keeps never goes stale: the ping's consolidated capacity, the Host check,
the heap frozen after batches of pods, pods started in one supervisor message, and a pod's
record saved only when it changed."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors.resources import CPU, Resources
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink import resources
from dmsgw.interlink.resources import Capacity, ResourceActor
from dmsgw.interlink.server import front_door, host_is_local
from tests.gateway_fakes import FakeDMS


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(1_700_000_000 * NS_PER_SECOND)


# --- the ping ------------------------------------------------------------------------------


async def test_the_ping_is_consolidated_once_per_gathering_and_again_when_it_changes(
    tmp_path: Path, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached ping answers the reply already consolidated; once the peers are asked again
    (the cache expired) the reply says what they answer now."""
    dms = FakeDMS(tmp_path / "logs", free=Resources(cpu=CPU(cores=2.0)))
    consolidations = 0
    consolidate = resources.consolidate_capacity

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal consolidations
        consolidations += 1
        return consolidate(*args, **kwargs)

    monkeypatch.setattr(resources, "consolidate_capacity", counting)
    capacity = Capacity(ResourceActor.start(dms, ttl_s=20.0, clock=clock), pods_capacity=10)
    try:
        first = await capacity.ping()
        assert [await capacity.ping() for _ in range(3)] == [first] * 3
        assert (consolidations, dms.asked["resources/free"]) == (1, 1)
        dms.free = Resources(cpu=CPU(cores=8.0))
        clock.advance(21.0)
        changed = await capacity.ping()
    finally:
        await capacity.close()
    assert (consolidations, dms.asked["resources/free"]) == (2, 2)
    assert first.resources is not None and first.resources.cpu == "2"
    assert changed.resources is not None and changed.resources.cpu == "8"


# --- the Host check --------------------------------------------------------------------------


def test_the_host_check_parses_a_host_and_address_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request names the same Host on the same socket: it is parsed once, and the
    answers stay what they were (a wrong port or name is still refused)."""
    parsed: list[str] = []
    parse = ipaddress.ip_address

    def counting(text: str) -> Any:
        parsed.append(text)
        return parse(text)

    monkeypatch.setattr(front_door.ipaddress, "ip_address", counting)
    host_is_local.cache_clear()
    sockname = ("127.0.0.1", 4000)
    assert [host_is_local("127.0.0.1:4000", sockname) for _ in range(5)] == [True] * 5
    once = len(parsed)
    assert [host_is_local("127.0.0.1:4000", sockname) for _ in range(5)] == [True] * 5
    assert len(parsed) == once
    assert not host_is_local("127.0.0.1:4001", sockname)
    assert not host_is_local("evil.example:4000", sockname)
    assert host_is_local("localhost:4000", sockname)
