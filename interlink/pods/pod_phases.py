"""A pod's phases and every move between them, in one table: :data:`MOVES`.

The phases are :class:`~..records.pod_record.Phase` (stored with the record). A pod is born in
:data:`BORN_IN` (a create queues its first attempt; a pod re-adopted from its ``JobID`` is
running; a record of an older gateway may still be pending). From then on its ``PodActor``
changes the phase only through :func:`move`, which refuses a move the table does not have, and
then runs the follower's :class:`Step` the table names; a restarted actor resumes with the step
of :data:`RESUMES`. ``tests/test_pod_phases.py`` walks every row through a real actor.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from ...errors import DmsgwError
from ..records.pod_record import Phase


class Event(enum.Enum):
    """What happens to a pod (the follower's report, or the gateway's request)."""

    ATTEMPT = "its next attempt is recorded: a new pod, a back-off over, a capacity refusal"
    ADMITTED = "the admission queue gave the attempt its DMS capacity"
    DEPLOYED = "the DMS took the deployment"
    DEPLOY_FAILED = "the attempt cannot be deployed (a refusal, a translation error)"
    RESTART = "the restartPolicy runs the pod again (it ended, a container was left down, lost)"
    INIT_FAILED = "an init container failed under restartPolicy Never"
    ENDED = "the deployment ended and the restartPolicy runs it no more"
    LOST = "the DMS no longer knows the deployment, under restartPolicy Never"
    STOPPED = "the ended pod's ensemble is shut down"
    DELETE = "interLink deleted the pod"
    SHUT_DOWN = "the deleted pod's ensemble is shut down"


class Step(enum.Enum):
    """What the pod's follower does after a move (its method of the same name)."""

    QUEUE = "queue"
    DEPLOY = "deploy"
    FOLLOW = "follow"
    BACK_OFF = "back_off"
    END = "end"
    SHUT_DOWN = "shut_down"
    NOTHING = "nothing"  # the pod rests (ended for good)
    FORGET = "forget"  # the pod is deleted: its actor stops


GONE = "gone"
"""Not a stored phase: where a deleted pod goes (its record is removed)."""


class Move(NamedTuple):
    start: str
    event: Event
    end: str
    step: Step


_MOVES_OF_ITS_LIFE = (
    Move(Phase.PENDING, Event.ATTEMPT, Phase.QUEUED, Step.QUEUE),
    Move(Phase.QUEUED, Event.ADMITTED, Phase.DEPLOYING, Step.DEPLOY),
    Move(Phase.QUEUED, Event.DEPLOY_FAILED, Phase.TERMINAL, Step.NOTHING),
    Move(Phase.DEPLOYING, Event.DEPLOYED, Phase.RUNNING, Step.FOLLOW),
    Move(Phase.DEPLOYING, Event.DEPLOY_FAILED, Phase.TERMINAL, Step.NOTHING),
    Move(Phase.DEPLOYING, Event.ATTEMPT, Phase.QUEUED, Step.QUEUE),  # refused: no capacity
    Move(Phase.RUNNING, Event.ATTEMPT, Phase.QUEUED, Step.QUEUE),  # never placed: no capacity
    Move(Phase.RUNNING, Event.RESTART, Phase.BACKOFF, Step.BACK_OFF),
    Move(Phase.RUNNING, Event.INIT_FAILED, Phase.ENDING, Step.END),
    Move(Phase.RUNNING, Event.ENDED, Phase.TERMINAL, Step.NOTHING),
    Move(Phase.RUNNING, Event.LOST, Phase.TERMINAL, Step.NOTHING),
    Move(Phase.BACKOFF, Event.ATTEMPT, Phase.QUEUED, Step.QUEUE),
    Move(Phase.ENDING, Event.STOPPED, Phase.TERMINAL, Step.NOTHING),
)
_ALL_PHASES = (
    Phase.PENDING,
    Phase.QUEUED,
    Phase.DEPLOYING,
    Phase.RUNNING,
    Phase.BACKOFF,
    Phase.ENDING,
    Phase.TERMINAL,
)
MOVES: tuple[Move, ...] = (
    *_MOVES_OF_ITS_LIFE,
    *(Move(phase, Event.DELETE, Phase.DELETING, Step.SHUT_DOWN) for phase in _ALL_PHASES),
    Move(Phase.DELETING, Event.SHUT_DOWN, GONE, Step.FORGET),
)
"""Every move of a pod: from ``start`` on ``event`` to ``end``, then the follower's ``step``."""

BORN_IN = frozenset({Phase.QUEUED, Phase.RUNNING, Phase.PENDING})
"""The phases a pod's first record has: a create's first attempt waits for capacity; a pod
re-adopted from its ``JobID`` annotation is followed; an older gateway recorded ``pending``."""

RESUMES: dict[str, Step] = {
    Phase.PENDING: Step.QUEUE,  # once its first attempt is recorded (ATTEMPT)
    Phase.QUEUED: Step.QUEUE,
    Phase.DEPLOYING: Step.DEPLOY,
    Phase.RUNNING: Step.FOLLOW,
    Phase.BACKOFF: Step.BACK_OFF,
    Phase.ENDING: Step.END,
    Phase.TERMINAL: Step.NOTHING,
    Phase.DELETING: Step.SHUT_DOWN,
}
"""What a restarted actor's follower does, by the phase stored: what the move into it began."""

_BY_START = {(m.start, m.event): m for m in MOVES}


class PhaseError(DmsgwError):
    """A move the table does not have: a bug in the actor, which its supervisor restarts."""


def move(phase: str, event: Event) -> Move:
    """The move of a pod in ``phase`` on ``event``."""
    found = _BY_START.get((phase, event))
    if found is None:
        raise PhaseError(f"a pod in phase {phase!r} has no move on {event.name}")
    return found
