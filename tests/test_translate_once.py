"""Each deploy attempt of a pod is translated once (decision 110): the ensemble ``/create``
made to refuse what cannot run is the first attempt's, in the admission queue and at the
deploy; a later attempt is translated once too. Counted through the gateway's translation
(``GatewayParts.translate``), over the in-memory DMS of :mod:`tests.gateway_fakes`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.pods.pod_translation import FirstAttempts, TranslationNotReadyError
from dmsgw.interlink.records.pod_record import ATTEMPT_KEY, Phase
from dmsgw.interlink.state.recovery import OWNER_KEY
from dmsgw.interlink.wire.bodies import RetrievedPodData
from dmsgw.interlink.wire.parsing import parse_create_body
from tests.support.gateway_fakes import (
    FakeDMS,
    create,
    gateway_on,
    plain_translation,
    pod,
    uid,
    until,
)

OWNER = "did:key:the-gateway"


class CountedTranslation:
    """The plain translation, counting its calls by generation; the first ``not_ready``
    calls raise :class:`TranslationNotReadyError` (a catalog still unknown)."""

    def __init__(self, not_ready: int = 0) -> None:
        self.calls: Counter[int] = Counter()
        self.not_ready = not_ready

    def __call__(self, data: RetrievedPodData, generation: int) -> Any:
        self.calls[generation] += 1
        if self.not_ready:
            self.not_ready -= 1
            raise TranslationNotReadyError("the catalog is not known yet", _nothing)
        return plain_translation(data, generation)


async def _nothing() -> None:
    return None


@pytest.fixture
def dms(tmp_path: Path) -> FakeDMS:
    return FakeDMS(tmp_path / "logs")


async def _created(
    dms: FakeDMS, translate: CountedTranslation, tmp_path: Path, n: int
) -> AsyncIterator[Gateway]:
    """A gateway over ``dms`` translating with ``translate``, once pod ``n`` (created, with
    ``restartPolicy: Never``) is deployed."""
    clock = FixedClock(1_700_000_000 * NS_PER_SECOND)
    gateway = await gateway_on(
        dms, tmp_path / "state", owner=OWNER, clock=clock, translate=translate
    )
    try:
        await create(gateway, pod(uid(n), policy="Never"))
        await until(lambda: len(dms.live(uid(n))) == 1, "deployed")
        yield gateway
    finally:
        await gateway.close()


async def test_a_created_pod_is_translated_once_for_its_refusal_queue_and_deploy(
    dms: FakeDMS, tmp_path: Path
) -> None:
    translate = CountedTranslation()
    async for _ in _created(dms, translate, tmp_path, 1):
        deployed = dms.live(uid(1))[0]
        assert translate.calls == Counter({1: 1})
        assert deployed.metadata[ATTEMPT_KEY] == "1"  # the create's ensemble, stamped
        assert deployed.metadata[OWNER_KEY] == OWNER


async def test_a_pod_not_translatable_at_its_create_is_translated_once_afterwards(
    dms: FakeDMS, tmp_path: Path
) -> None:
    """The create's translation could not be had yet: the queue's is the deploy's."""
    translate = CountedTranslation(not_ready=1)
    async for _ in _created(dms, translate, tmp_path, 2):
        assert translate.calls == Counter({1: 2})  # the create's (not ready), the queue's


async def test_an_attempt_after_a_refusal_is_translated_once_too(
    dms: FakeDMS, tmp_path: Path
) -> None:
    """The DMS refuses the first attempt for lack of room: the pod waits again and its
    second attempt is translated once, in the queue, and deployed as translated there."""
    dms.refuse = 1
    translate = CountedTranslation()
    async for gateway in _created(dms, translate, tmp_path, 3):
        assert dms.live(uid(3))[0].metadata[ATTEMPT_KEY] == "2"
        assert gateway.book.records[uid(3)].phase != Phase.TERMINAL
        assert translate.calls == Counter({1: 1, 2: 1})


def test_a_kept_first_attempt_is_handed_out_once_and_only_to_the_first_attempt() -> None:
    translate = CountedTranslation()
    first = FirstAttempts(translate)
    body = json.dumps({"pod": pod(uid(4)), "container": [{"name": "main"}]}).encode()
    (data,) = parse_create_body(body)
    kept: Any = object()
    first.keep(uid(4), kept)
    assert first(data, 1) is kept
    assert first(data, 1) is not kept  # handed out once: translated again
    first.keep(uid(4), kept)
    assert first(data, 2) is not kept  # another attempt is translated, and the kept let go
    assert first(data, 1) is not kept
    first.keep(uid(4), kept)
    first.forget(uid(4))  # the pod was deleted before its actor asked
    assert first(data, 1) is not kept
    assert translate.calls == Counter({1: 3, 2: 1})
