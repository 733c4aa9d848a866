"""Keeping the cyclic garbage collector's passes short while tens of thousands of pods live.

Each live pod is many objects the collector tracks (its actor's task, mailbox and events, its
follower's coroutine, its snapshot). A full pass walks all of them — seconds at 100,000 pods
(bench/README.md, "The frozen heap") — and it runs whenever the long-lived heap has grown by a
quarter, stopping the event loop meanwhile. Pods live long, so :class:`HeapFreezer` moves them
out of the
collector's sight (``gc.freeze``) once a batch of them has settled, right after a collection
that leaves nothing unreachable behind: every pass after that walks only what is younger.
What Python's own full collections leave is frozen too, for the same reason.

A frozen object is never walked again, so the collector never frees a frozen object that ends
up in a reference cycle: only reference counting frees frozen objects. A deleted pod leaves no
reference cycle (its actor, follower and tasks let go of one another when the actor ends), so
deleting pods needs no pass over the frozen pods; the heap is thawed only when the gateway
closes. Deleting does settle as creating does (:meth:`HeapFreezer.let_go`), and so do the
polls of followed pods (:meth:`HeapFreezer.polled`): while frozen objects are freed, Python
runs no young collection, and what is made meanwhile piles up. What the frozen heap may
still keep is cyclic garbage of work in flight at a freeze (a connection open then) that was
alive then and became garbage later: it stays until the process ends.
The bench names it (``bench/pods.py``: the pods leave none; a connection open at a freeze and
closed later leaves a few objects), and decision 50 says why we accept it rather than thaw.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

FREEZE_EVERY = 64
"""Pods taken on (or let go) between two freezes: the collection before each walks what is
younger than the last freeze, 64 pods' objects and the work in flight, so no collection walks
more than that many pods' worth between two freezes: a quarter of the earlier 256, whose
passes were longer than the longest stall allowed (bench/README.md, "The frozen heap")."""


POLLS_BETWEEN_FREEZES = 256
"""Polls of followed pods between two freezes. A poll makes anew the objects its pod holds
until the next (the sleep's task wake-up, future, timer and context, the last reply, the
ledgers); a resumed pod's first poll several times more (its follower's view of the pod, and
the pod parsed again into the cache of parsed requests). 256 polls' worth is walked well
within the longest stall allowed; twice that, after a restart, came up to it
(bench/README.md, "The frozen heap")."""


class HeapFreezer:
    """Freezes the heap after every ``every`` pods taken on (their actors started: created,
    resumed, re-adopted, restarted) or let go (deleted), after every
    :data:`POLLS_BETWEEN_FREEZES` polls of followed pods, and after every full collection of
    Python's own. ``every=0`` never freezes (the tests' gateways, which share one process)."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self._every = every
        self._taken = 0  # pods taken on or let go since the last freeze
        self._polls = 0  # polls of followed pods since the last freeze
        self._paused = False  # a restart resumes: settles wait for the one that ends it
        if every:
            gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """(In whichever thread collected.) Python's own full collections walk only what is
        younger than the last freeze too, but what they leave stayed unfrozen: the state that
        live pods make after they settle (a followed pod's poll replaces its last reply and
        ledgers) piled up there, and at 100,000 pods such a pass held the loop for a second
        (bench/README.md, "The frozen heap"). A full
        collection has just left nothing unreachable: what it leaves is frozen, as a settle's."""
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()

    def took(self, pods: int = 1) -> None:
        """``pods`` more pods live (a pod's actor calls it once it has started: what the start
        made is then there to freeze); freeze once ``every`` pods have come or gone since the
        last freeze. Counted when the actors start, not when they are asked for: a restart's
        actors start turns after the resume has frozen, and 100,000 of them, never counted,
        were walked by the first settle that came, for seconds (bench/README.md, "The frozen
        heap")."""
        if not self._every:
            return
        self._taken += pods
        if self._taken >= self._every and not self._paused:
            self.settle()

    def let_go(self, pods: int = 1) -> None:
        """``pods`` pods were deleted: their frozen objects are freed as their actors end.
        CPython lowers the young generation's count of allocations at every free (down to
        zero), so while pods are deleted faster than anything is made, no young collection
        runs, and all that is made meanwhile piles up young: the collection that finally runs
        walks it all (after a quarter of 100,000 pods deleted, the longest stall of the
        deletes: bench/README.md, "The frozen heap"). Settling every ``every`` pods let go, as
        every ``every`` taken on, keeps that pile to so many pods' worth."""
        self.took(pods)

    def polled(self) -> None:
        """A followed pod has polled the DMS; freeze once :data:`POLLS_BETWEEN_FREEZES` have.
        A live pod renews what it holds at each poll, and frees what it held (frozen, or made
        since): CPython lowers the young generation's count at each free, so in the steady
        state of polling no young collection runs for long, and the one that finally runs walks
        every pod's renewed state, past the longest stall allowed at 10,000 pods
        (bench/README.md, "The frozen heap"). A settle every so many polls keeps that pile to
        so many polls' worth (decision 55)."""
        if not self._every:
            return
        self._polls += 1
        if self._polls >= POLLS_BETWEEN_FREEZES and not self._paused:
            self.settle()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No collection runs meanwhile (a restart resuming every stored pod, before the plugin
        API listens): the young collections walked the resumed pods again and again, a
        quarter of the resume's time. Nor does a settle: the pods counted meanwhile (actors
        that start between two batches of the resume) wait for the one the caller makes
        after."""
        pausing = bool(self._every) and gc.isenabled()
        if pausing:
            gc.disable()
        self._paused = True  # nor a settle: its pass would walk every record read so far
        try:
            yield
        finally:
            self._paused = False
            if pausing:
                gc.enable()

    def settle(self, *, collect: bool = True) -> None:
        """Collect what is unreachable (a pass over what is younger than the last freeze),
        then freeze what is left. A restart's resume freezes without collecting
        (``collect=False``): that pass over every resumed pod held the loop for a second at
        10,000 pods (bench/README.md, "The frozen heap"), and found nothing to collect."""
        if not self._every:
            return
        started = time.perf_counter()
        if collect:
            gc.collect()
        gc.freeze()
        self._taken = self._polls = 0
        log.debug("heap frozen in %.1f ms", (time.perf_counter() - started) * 1e3)

    def close(self) -> None:
        """The pods are gone (the gateway closed): what was frozen is the collector's again.
        A second close does nothing (a gateway may be closed twice), nor does a later take."""
        if self._every:
            gc.callbacks.remove(self._collected)
            gc.unfreeze()
            self._taken = self._every = 0


NO_FREEZER = HeapFreezer(every=0)
"""A freezer that never freezes: the heap of pods that no gateway's freezer looks after
(tests' actors, one-off tools)."""
