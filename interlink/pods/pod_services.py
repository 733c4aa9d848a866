"""What every pod's actor and its follower are handed: :class:`PodServices`, one immutable
bundle built once by the gateway and shared by all its pods.

A pod changes nothing in it. The objects in it that hold state (the store, the book, the pace,
the board, the admission queue) each guard their own and are reached by their methods; the
bundle itself only says which ones a pod uses, so that neither a long keyword list nor a
closure over the gateway is the wiring."""

from __future__ import annotations

import asyncio
import dataclasses
import random

from ...actors.turns import Turns
from ...behaviors.node import Invoke
from ...clock import Clock, system_clock
from ..capacity.admission_queue import AdmissionQueue
from ..logs.kept_logs import KeptLogs
from ..records.pod_record import DEFAULT_POLICY, PodPolicy, Snapshot
from ..state.pod_store import PodStore
from .deployment_board import DeploymentBoard
from .heap import NO_FREEZER, HeapFreezer
from .pod_book import PodBook
from .pod_translation import Translate
from .poll_pace import PollPace


@dataclasses.dataclass(frozen=True)
class PodServices:
    """The DMS, the state and the gateway's shared parts, as every pod of one gateway uses them."""

    invoke: Invoke
    store: PodStore
    translate: Translate
    status_of: Snapshot
    """A record's ``/status`` entry: a pure read (the actor publishes it through ``book``)."""
    book: PodBook
    """Where a pod's actor publishes its record and ``/status`` entry, and is forgotten."""
    loop: asyncio.AbstractEventLoop | None = None
    """The loop the pods' actors run on (the running loop when ``None``)."""
    policy: PodPolicy = DEFAULT_POLICY
    clock: Clock = system_clock
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    """The retry jitter of every pod (one generator: each would cost a tenth of a pod)."""
    heap: HeapFreezer = NO_FREEZER
    """Told when an actor has started, and (by its follower) of each status poll."""
    pace: PollPace | None = None
    """How often all followed pods poll together (``None``: a pod alone)."""
    board: DeploymentBoard | None = None
    """Where a settled follow parks (``None``: every follow polls its deployment)."""
    turns: Turns | None = None
    """The gate that pods started together pass a few per turn of the loop."""
    admission: AdmissionQueue | None = None
    """The queue for DMS capacity (``None``: every attempt deploys at once)."""
    kept_logs: KeptLogs | None = None
    """Where the logs of the runs seen to end are kept (decision 69)."""
