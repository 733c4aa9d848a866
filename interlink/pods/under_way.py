"""Which pods have a create or a delete under way, so that the two never cross (decision
070): a delete that comes during its pod's create waits for the create and undoes what it
made; a create that comes during the delete of its UID waits for the delete, then makes the
pod afresh, or is refused when the delete outlasts a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from ..plugin_errors import PodBeingDeletedError

RECREATE_WAIT_S = 20.0
"""How long a ``/create`` of a UID whose delete is under way waits for that delete to end
(then it creates the pod afresh) before it is refused with 409 (decision 70): well within the
server's default deadline, while a delete waits out the pod's grace period."""


class UnderWay:
    """The creates and deletes under way, by pod UID (on the event loop)."""

    def __init__(self, recreate_wait_s: float) -> None:
        self._recreate_wait_s = recreate_wait_s
        self._creating: dict[str, asyncio.Future[None]] = {}
        self._deleting: dict[str, asyncio.Future[None]] = {}
        """Done when the pod is forgotten, or when its delete failed."""

    async def created(self, uid: str) -> None:
        """Wait until no create of ``uid`` is under way."""
        while (pending := self._creating.get(uid)) is not None:
            await asyncio.wait([pending])

    async def settled(self, uid: str) -> None:
        """Wait until neither a create of ``uid`` is under way (if that one failed, the caller
        tries again) nor a delete of it; a delete that outlasts ``recreate_wait_s`` raises
        :class:`PodBeingDeletedError` (a 409)."""
        while True:
            if (pending := self._creating.get(uid)) is not None:
                await asyncio.wait([pending])
            elif (deleting := self._deleting.get(uid)) is not None:
                await asyncio.wait([deleting], timeout=self._recreate_wait_s)
                if not deleting.done():
                    raise PodBeingDeletedError(
                        f"pod {uid} is still being deleted (its ensemble is shutting down, "
                        f"waited {self._recreate_wait_s:g} s): create it again once the "
                        "delete has finished"
                    )
            else:
                return

    @contextlib.contextmanager
    def creating(self, uid: str) -> Iterator[None]:
        """A create of ``uid`` is under way for as long as this lasts."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._creating[uid] = done
        try:
            yield
        finally:
            del self._creating[uid]
            done.set_result(None)

    @contextlib.contextmanager
    def deleting(self, uid: str) -> Iterator[None]:
        """A delete of ``uid`` is under way from now until :meth:`deleted`, or until this
        ends with an error (the delete failed: a create waiting goes on)."""
        if uid not in self._deleting:
            self._deleting[uid] = asyncio.get_running_loop().create_future()
        try:
            yield
        except BaseException:
            self.deleted(uid)
            raise

    def deleted(self, uid: str) -> None:
        """The delete of ``uid`` is over (done, or failed): the creates waiting go on."""
        deleting = self._deleting.pop(uid, None)
        if deleting is not None and not deleting.done():
            deleting.set_result(None)
