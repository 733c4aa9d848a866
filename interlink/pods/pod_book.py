"""Every pod the gateway has taken on, as the gateway answers for it: :class:`PodBook`.

The gateway writes the record a pod is taken on with; the pod's actor, the one writer of its
pod, publishes its record and ``/status`` entry in one explicit step (:meth:`PodBook.publish`)
and is forgotten in another (:meth:`PodBook.forget`). Readers (``/status``, ``/pods``, the
orphan collection) read without a round trip to any actor."""

from __future__ import annotations

from ...actors.sharded import ShardedDict
from ..records.pod_record import PodRecord
from ..records.snapshots import Shown, Snapshots
from ..state.recovery import PollLedger
from .heap import HeapFreezer
from .pod_translation import FirstAttempts
from .under_way import UnderWay


class PodBook:
    """The pods taken on: their records, their ``/status`` entries, their polls, and the
    deletes under way that wait for a pod to be forgotten."""

    def __init__(
        self,
        polls: PollLedger,
        under_way: UnderWay,
        heap: HeapFreezer,
        first_attempts: FirstAttempts | None = None,
    ) -> None:
        self.records: ShardedDict[str, PodRecord] = ShardedDict()
        """Each pod's record as the gateway took it on or last changed it: a restarted actor
        resumes from it."""
        self._latest: ShardedDict[str, PodRecord] = ShardedDict()
        self.snapshots = Snapshots()
        self.polls = polls
        self.under_way = under_way
        self._heap = heap
        self._first_attempts = first_attempts  # the creates' translations not yet used

    def take_on(self, record: PodRecord, shown: Shown | None = None) -> None:
        """The pod is known from now on, and answers polls with ``shown`` at once if given (its
        actor may start turns later, and publishes the same entry then)."""
        self.records[record.uid] = record
        self.polls.took(record.uid)
        if shown is not None:
            self.snapshots.publish(record.uid, shown)

    def publish(self, record: PodRecord, shown: Shown) -> None:
        """A pod's actor publishes its record and the ``/status`` entry read from it."""
        self._latest[record.uid] = record
        self.snapshots.publish(record.uid, shown)

    def forget(self, uid: str) -> None:
        """The pod is deleted (its actor finished, or it ended with none): a create of its
        UID waiting for the delete goes on, and the heap lets go of what it held."""
        self.snapshots.forget(uid)
        self._latest.pop(uid, None)
        self.records.pop(uid, None)
        self.polls.drop(uid)
        self.under_way.deleted(uid)
        if self._first_attempts is not None:
            self._first_attempts.forget(uid)
        self._heap.let_go()

    def pods(self) -> list[tuple[PodRecord, Shown | None]]:
        """Every pod: its newest published record and its ``/status`` entry (``None`` before
        the first)."""
        return [
            (self._latest.get(uid, record), self.snapshots.shown(uid))
            for uid, record in self.records.items()
        ]
