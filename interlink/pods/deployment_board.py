"""Many deployments' states in one call (design principle 9, decision 79).

Following a pod used to cost one signed ``deployment/status`` round trip per pod per poll:
10,000 pods at the pace's 1,000 polls a second were more CPU than the gateway's host has
(bench/README.md, "The pace of polls"). A
followed pod whose deployment has settled (:func:`~dmsgw.interlink.pods.follow_state.settled`)
now parks on the gateway's one :class:`DeploymentBoard` instead of polling: the board asks the DMS
for ``deployment/list`` (the gateway's own ensembles, by its owner label) once every
``every_s``, and wakes only the parked pods whose deployment the listing shows changed, or no
longer shows. A woken pod asks about its deployment as before (status, manifest, logs), and
parks again once it has settled again.

What a listing shows of a deployment (:data:`Listed`) is its status and, on a DMS that lists
them (the newest), when it was last updated: the devnet's orchestrators update it with every
change of an allocation as well. The v0.5 DMS lists each deployment's status alone, which is
also all its ``deployment/status`` answers.

While nothing changes, a listing costs the gateway its DMS calls and little more: the client
hands out the reply it decoded from a page's bytes when the same bytes come again
(:class:`~dmsgw.behaviors.deployment.RecentPages`), and a listing whose pages are all the
last one's checks only the follows parked since (decision 128). A listing that changed is
checked a slice of follows at a time, so that a big one never holds the loop long.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Protocol

from ...behaviors.catalog import DEPLOYMENT_LIST
from ...behaviors.deployment import DeploymentListRequest, DeploymentListResponse
from ...behaviors.node import Invoke
from ...behaviors.status import DeploymentStatus
from ...errors import DmsgwError
from ..state.recovery import OWNER_KEY

log = logging.getLogger(__name__)

PAGE = 1000
"""Deployments a listing asks for at a time (a DMS without paging answers them all): each
reply stays a bounded piece of work for both sides; one reply of every deployment went
unanswered within the request's timeout on a busy machine (bench/README.md, "The pace of
polls")."""
STARTING_EVERY_S = 0.5
"""The listing period while a deployment on its way to running is parked: a pod created is
seen running within it, and the deployments starting together cost one listing for all."""

ORDER = "created_at"
"""The order the board asks the pages in: oldest first, so that a deployment created changes
the last page alone, and the pages before it come as the same bytes again (decision 128)."""
SLICE = 250
"""Parked follows checked against a listing in one turn of the loop: each one woken schedules
its poll, and a listing that woke every follow of 2,000 made slices of 1,000 the steady
state's longest callback (bench/README.md, "Issue 28, following 10,000 pods")."""

Page = DeploymentListResponse
"""One page of a listing, as the DMS answered it."""

Listed = tuple[str, str]
"""A deployment as a listing shows it: its status name and when it was last updated (``""``
where the DMS does not say)."""


class Parked(Protocol):
    """A pod's follow parked on the board: told what the listing now shows of its deployment
    (``None``: no longer listed) when that is not what it parked with."""

    def woken(self, listed: Listed | None) -> None: ...


class DeploymentBoard:
    """The parked follows of a gateway's pods, woken by what one ``deployment/list`` a period
    shows (see the module docstring). ``every_s`` says the period, read at each (0: listed
    only when :meth:`list_once` is awaited); ``owner`` is the gateway's owner label (``""``:
    every deployment of the DMS is listed)."""

    def __init__(self, invoke: Invoke, owner: str, *, every_s: Callable[[], float]) -> None:
        self._invoke = invoke
        self._request = DeploymentListRequest(
            metadata={OWNER_KEY: owner} if owner else None, limit=PAGE, sort_by=ORDER
        )
        self._every_s = every_s
        self._parked: dict[str, tuple[Listed | None, Parked, str]] = {}
        self._starting = 0  # parked follows of deployments on their way to running
        self._soon = asyncio.Event()  # one of those parked while the board waited long
        self._listed_at = -math.inf  # the loop's time of the last listing
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._fresh: set[str] = set()  # parked since the last listing answered
        self._pages: list[Page] = []  # the last listing answered
        self._shown: dict[str, Listed] = {}  # what it showed
        self.listings = 0
        """The listings asked for so far (answered or not)."""
        self.checked = 0
        """The parked follows checked against a listing so far."""

    @property
    def parked(self) -> int:
        """How many follows are parked now."""
        return len(self._parked)

    def park(
        self, ensemble_id: str, listed: Listed | None, follow: Parked, *, starting: str = ""
    ) -> None:
        """Wake ``follow`` once a listing shows ``ensemble_id`` other than ``listed`` (at the
        next listing, for ``None``: it learns what the listing shows); or, for a deployment
        ``starting`` (its status now, on its way to running), once it shows another status.
        While any such is parked the board lists every :data:`STARTING_EVERY_S`."""
        self._forget(ensemble_id)
        self._parked[ensemble_id] = (listed, follow, starting)
        self._fresh.add(ensemble_id)
        if starting:
            self._starting += 1
            self._soon.set()
        if self._every_s() > 0 and not self._closed and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._run())

    def unpark(self, ensemble_id: str, follow: Parked) -> None:
        """``follow`` of ``ensemble_id`` ended while parked: it is woken no more (another
        follow parked since for the same deployment, a restarted pod actor's, stays)."""
        parked = self._parked.get(ensemble_id)
        if parked is not None and parked[1] is follow:
            self._forget(ensemble_id)

    def _forget(self, ensemble_id: str) -> None:
        parked = self._parked.pop(ensemble_id, None)
        if parked is not None and parked[2]:
            self._starting -= 1

    def _period(self) -> float:
        every = self._every_s()
        return min(every, STARTING_EVERY_S) if self._starting else every

    async def _run(self) -> None:
        """List every period while any follow is parked: sooner once a deployment on its way
        to running parks, but never sooner than its period after the last listing."""
        loop = asyncio.get_running_loop()
        while self._parked:
            self._soon.clear()
            with contextlib.suppress(TimeoutError):
                left = self._listed_at + self._period() - loop.time()
                async with asyncio.timeout(max(left, 0.0)):
                    await self._soon.wait()
            left = self._listed_at + self._period() - loop.time()
            if left > 0:
                await asyncio.sleep(left)
            self._listed_at = loop.time()
            await self.list_once()

    async def list_once(self) -> None:
        """Ask the DMS for its deployments once, and wake each parked follow whose deployment
        it shows changed or no longer shows. A listing the DMS does not answer wakes none:
        asking about each deployment instead would put the whole load on a DMS that is
        failing (the next period lists again).

        A listing whose pages are the same replies as the last one's (the client hands out
        the reply it decoded from the same bytes: decision 128) shows nothing new: only the
        follows parked since are checked against it. The follows are checked a slice at a
        time, with a turn of the loop between two slices (and between two pages), so that a
        big listing never holds the loop long."""
        self.listings += 1
        pages = await self._pages_now()
        if pages is None:
            return
        fresh, self._fresh = self._fresh, set()
        if _same(pages, self._pages):
            candidates = [ensemble_id for ensemble_id in fresh if ensemble_id in self._parked]
        else:
            self._pages, self._shown = pages, _shown(pages)
            candidates = list(self._parked)
        shown = self._shown
        for start in range(0, len(candidates), SLICE):
            if start:
                await asyncio.sleep(0)
            for ensemble_id in candidates[start : start + SLICE]:
                self._check(ensemble_id, shown.get(ensemble_id))

    def _check(self, ensemble_id: str, now: Listed | None) -> None:
        """Wake the follow parked for ``ensemble_id``, if any, when the listing shows its
        deployment (``now``) other than it parked with."""
        parked = self._parked.get(ensemble_id)
        if parked is None:
            return  # woken or gone while the board yielded
        self.checked += 1
        listed, follow, starting = parked
        if _changed(now, listed, starting):
            self._forget(ensemble_id)
            follow.woken(now)

    async def _pages_now(self) -> list[Page] | None:
        """The listing's pages, page after page while the DMS says it has more; ``None``
        when it did not answer."""
        pages: list[Page] = []
        request = self._request
        while True:
            try:
                page = await self._invoke(DEPLOYMENT_LIST, request)
            except DmsgwError as exc:
                log.warning("deployment/list unanswered (%s): parked pods wait for the next", exc)
                return None
            pages.append(page)
            if not page.has_more or page.next_offset <= request.offset:
                return pages
            request = dataclasses.replace(request, offset=page.next_offset)
            await asyncio.sleep(0)  # a DMS in this process answers without a turn of the loop

    async def close(self) -> None:
        """Stop listing (the gateway closes)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _same(pages: list[Page], before: list[Page]) -> bool:
    """Whether ``pages`` are the very replies of the listing ``before``."""
    return len(pages) == len(before) and all(a is b for a, b in zip(pages, before, strict=True))


def _shown(pages: list[Page]) -> dict[str, Listed]:
    """Each listed deployment's :data:`Listed`."""
    return {d.orchestrator_id: (d.status, d.updated_at) for p in pages for d in p.deployments or ()}


def _changed(now: Listed | None, listed: Listed | None, starting: str) -> bool:
    """Whether a follow parked with ``listed`` (or ``starting``: its status then) is woken by
    what the listing shows now (``None``: no longer listed)."""
    if starting:
        return now is None or DeploymentStatus.parse(now[0]) != DeploymentStatus.parse(starting)
    return listed is None or now != listed
