"""Keeping the cyclic garbage collector's passes short while tens of thousands of pods live.

Each live pod is ~100 objects the collector tracks (its actor's task, mailbox and events, its
follower's coroutine, its snapshot). A full pass walks all of them — 0.5 s at 10,000 pods,
5 s at 100,000 — and it runs whenever the long-lived heap has grown by a quarter, stopping the
event loop meanwhile. Pods live long, so :class:`HeapFreezer` moves them out of the
collector's sight (``gc.freeze``) once a batch of them has settled, right after a collection
that leaves nothing unreachable behind: every pass after that walks only what is younger.

The price: an object frozen and later dropped, if it is part of a reference cycle, is not
collected until the heap is thawed. That is what a deleted pod leaves, and what a request in
flight at the freeze leaves; so once pods amounting to a quarter of those frozen have been
deleted, the freezer thaws the heap, collects it in full (one pass, as often as Python's own
rule would run one) and freezes it again.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

FREEZE_EVERY = 256
"""Pods taken on between two freezes: the collection before each walks ~256 pods' objects
(~15 ms), and no collection walks more than that many pods' worth between two freezes."""


class HeapFreezer:
    """Freezes the heap after every ``every`` pods taken on (created, resumed, re-adopted),
    thaws and collects it in full once a quarter of the frozen pods have been deleted.
    ``every=0`` never freezes (the tests' gateways, which share one process)."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self._every = every
        self._taken = 0  # pods taken on since the last freeze
        self._frozen = 0  # pods frozen since the last thaw
        self._deleted = 0  # pods deleted since the last thaw

    def took(self, pods: int = 1) -> None:
        """``pods`` more pods live; freeze once ``every`` have since the last freeze."""
        if not self._every:
            return
        self._taken += pods
        if self._taken >= self._every:
            self.settle()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No collection runs meanwhile (a restart resuming every stored pod, before the plugin
        API listens): the young collections walked the resumed pods again and again, a
        quarter of the resume's time. The caller then settles."""
        pausing = bool(self._every) and gc.isenabled()
        if pausing:
            gc.disable()
        try:
            yield
        finally:
            if pausing:
                gc.enable()

    def settle(self, pods: int = 0, *, collect: bool = True) -> None:
        """Collect what is unreachable, then freeze what is left: the pods taken on so far,
        and ``pods`` more. A restart's resume freezes without collecting (``collect=False``):
        that pass over every resumed pod held the loop ~1 s at 10,000 pods, and found nothing
        to collect; what a resume leaves in cycles, if anything, waits for the next thaw."""
        if not self._every:
            return
        started = time.perf_counter()
        if collect:
            gc.collect()
        gc.freeze()
        self._frozen += self._taken + pods
        self._taken = 0
        log.debug("heap frozen in %.1f ms", (time.perf_counter() - started) * 1e3)

    def close(self) -> None:
        """The pods are gone (the gateway closed): what was frozen is the collector's again."""
        if self._every:
            gc.unfreeze()
            self._taken = self._frozen = self._deleted = 0

    def dropped(self, pods: int = 1) -> None:
        """``pods`` pods were deleted (their actors have ended); thaw and collect once a
        quarter of those frozen were."""
        if not self._every:
            return
        self._deleted += pods
        if self._deleted >= max(self._every, self._frozen // 4):
            started = time.perf_counter()
            gc.unfreeze()
            self._frozen = max(0, self._frozen - self._deleted)
            self._deleted = 0
            self.settle()
            log.info("heap thawed and collected in %.0f ms", (time.perf_counter() - started) * 1e3)
