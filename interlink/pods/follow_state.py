"""What a pod's follow knows of its deployment between two polls (:class:`Following`), and the
rules a poll applies to it: whose logs it reads for the wrapper's markers (:func:`reads_log`),
what each container's runs are after it (:func:`runs_now`). No I/O: the pod's follower
(:mod:`~dmsgw.interlink.pods.pod_follower`) asks the DMS and reads the logs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...behaviors.status import AllocationStatus
from ..records.container_runs import Runs
from ..records.pod_record import parsed_request
from ..records.pod_status import allocation_of
from ..translate import is_wrapped

_NOT_STARTED = frozenset({"", AllocationStatus.PENDING})
_UNHEALTHY = "unhealthy"
END_READ_TRIES = 3
"""How many more polls a follower makes when a log could not be read at the deployment's end."""
MARKER_READ_EVERY = 4
"""A started wrapped container's log is read at least every this many polls: a restart in
place that the DMS made between two polls that both found its allocation running leaves no
other trace (the DMS counts no restarts), and showed only at the deployment's end. Not at
every poll: that would double the DMS calls of a steady pod (decision 67)."""


@dataclasses.dataclass(slots=True)
class Following:
    """What a follower knows of a followed deployment between two polls
    (:meth:`~dmsgw.interlink.pods.pod_follower.PodFollower.poll`). Not the parsed pod (a
    large part of a pod's memory, had it been kept as long as the pod lives:
    bench/README.md, "Memory per pod"): what the polls need of it is read once (:meth:`of`),
    and the rest again (cached) when needed."""

    ensemble_id: str
    resumed: bool  # its stored snapshot shows it already: the first poll is not news
    interval: float  # the wait after the next poll that finds nothing new grows from this
    containers: dict[str, bool]  # each container, init containers first: whether it is wrapped
    probed: frozenset[str]  # the containers whose wrapper runs probes
    inits: tuple[str, ...]  # the init containers, in the order they run
    runs: dict[str, Runs]
    last: tuple[Any, ...] | None = None  # the status and allocations the last news reported
    seen: dict[str, tuple[str, str] | None] = dataclasses.field(default_factory=dict)
    end_reads_left: int = END_READ_TRIES
    unknown: int = 0  # status polls in a row that found the deployment unknown to the DMS
    placement_due: bool = True  # the running manifest is read once it runs, until read
    listed: tuple[str, str] | None = None  # the deployment in the board's listing before a poll
    quiet: bool = False  # the last poll found nothing new (or only what a resumed pod showed)
    polls: int = 0  # polls made, answered: every MARKER_READ_EVERY-th reads the started logs

    @classmethod
    def of(
        cls,
        ensemble_id: str,
        request: bytes,
        runs_so_far: Mapping[str, Any],
        *,
        resumed: bool,
        interval: float,
    ) -> Following:
        """The deployment ``ensemble_id`` of the pod whose ``/create`` body is ``request``,
        before its first poll: its containers' runs as recorded (``runs_so_far``)."""
        containers = _wrapped_containers(request)
        return cls(
            ensemble_id=ensemble_id,
            resumed=resumed,
            interval=interval,
            containers=containers,
            probed=_probed_containers(request),
            inits=_init_containers(request),
            runs={name: Runs.from_map(runs_so_far.get(name)) for name in containers},
        )


def _wrapped_containers(request: bytes) -> dict[str, bool]:
    """Each container of the pod, init containers first, and whether it runs wrapped: what a
    follower needs of the pod, without keeping the parsed pod alive as long as it follows."""
    pod = parsed_request(request).pod
    return {c.name: is_wrapped(pod, c) for c in (*pod.spec.init_containers, *pod.spec.containers)}


def _probed_containers(request: bytes) -> frozenset[str]:
    """The pod's containers whose wrapper runs probes (:func:`is_wrapped`, with a probe)."""
    pod = parsed_request(request).pod
    return frozenset(
        c.name
        for c in pod.spec.containers
        if is_wrapped(pod, c) and (c.startup_probe or c.liveness_probe or c.readiness_probe)
    )


def _init_containers(request: bytes) -> tuple[str, ...]:
    """The names of the pod's init containers, in the order they run."""
    return tuple(c.name for c in parsed_request(request).pod.spec.init_containers)


def _initializing(
    inits: tuple[str, ...], runs: Mapping[str, Runs], states: Mapping[str, tuple[str, str]]
) -> str:
    """The init container that may be running unseen (``""``: none): the first one that has
    not completed, while the DMS does not list it. The DMS runs it while it provisions the
    deployment (the main containers' set-ups wait for it) and lists it only once provisioning
    is over, so its markers are the only news of its run until then; the ones after it wait
    for it."""
    for name in inits:
        if runs[name].ended and not runs[name].running and runs[name].exit_code == 0:
            continue
        return name if states[name][0] in _NOT_STARTED else ""
    return ""


def runs_now(
    f: Following,
    read: Mapping[str, Runs],
    unread: set[str],
    states: Mapping[str, tuple[str, str]],
    *,
    ended: bool,
    at_ns: int,
) -> dict[str, Runs]:
    """Each container's runs after this poll: what its log just showed (``read``), then what
    its allocation's status shows. A container whose log could not be read keeps its runs as
    they were while the deployment runs: judging its status without its markers would count
    a run they may yet show."""
    runs = {**f.runs, **read}
    return {
        name: runs[name]
        if name in unread and not ended
        else runs[name].saw(states[name][0], deployment_ended=ended, wrapped=wraps, at_ns=at_ns)
        for name, wraps in f.containers.items()
    }


def reads_log(
    f: Following, name: str, states: Mapping[str, tuple[str, str]], *, ended: bool
) -> bool:
    """Whether this poll reads the container ``name``'s log for the wrapper's markers: only a
    wrapped container's, every one once the deployment has ended (the manifest may have
    failed too), and otherwise that of a container that has started and whose allocation
    changed, is unhealthy or runs probes (or at every :data:`MARKER_READ_EVERY`-th poll), or
    of the init container that may run unseen."""
    if not f.containers[name]:
        return False
    state = states[name]
    started = state[0] not in _NOT_STARTED
    changed = state != f.seen.get(name) or state[1] == _UNHEALTHY or name in f.probed
    due = f.polls % MARKER_READ_EVERY == 0  # a restart in place may have gone unseen
    return ended or (started and (changed or due)) or name == _initializing(f.inits, f.runs, states)


def settled(f: Following) -> bool:
    """Whether only a change that the DMS's ``deployment/list`` shows can bring news of
    ``f``'s deployment, so that its follow may park on the gateway's board
    (:mod:`~dmsgw.interlink.pods.deployment_board`) instead of polling. Not while a container's
    wrapper runs probes (their outcomes change no DMS status), one is unhealthy (the DMS may
    restart it between two listings: its markers are the only trace), a log went unread, an
    init container may run unseen, the placement is unread or the last poll went unanswered."""
    return (
        f.last is not None
        and not f.probed
        and not f.placement_due
        and f.unknown == 0
        and not starts_unseen(f)
        and all(state is None or state[1] != _UNHEALTHY for state in f.seen.values())
    )


def starts_unseen(f: Following) -> bool:
    """Whether an init container of ``f``'s deployment may be running unseen: only its log's
    markers tell, so its follow keeps polling (:func:`reads_log`)."""
    states = {name: state for name, state in f.seen.items() if state is not None}
    return len(states) != len(f.containers) or bool(_initializing(f.inits, f.runs, states))


def allocation_state(
    name: str, listed: Mapping[str, Any], allocations: Mapping[str, Any]
) -> tuple[str, str]:
    """A container's allocation status and health, from the live info or the manifest."""
    status, info, _ = allocation_of(name, listed, allocations)
    return status, info.health if info is not None else ""


def after_news(
    f: Following,
    key: tuple[Any, ...],
    runs: dict[str, Runs],
    *,
    shortest_s: float,
    longest_s: float,
) -> None:
    """A poll reported news (``key``, ``runs``): the next comes after ``shortest_s``. But a
    resumed pod's first poll tells what its snapshot showed already, not news: it waits
    ``longest_s``, not ramping up from the shortest (resumed pods polled more often than the
    pace allowed: bench/README.md, "A restart's resume")."""
    first_of_resumed = f.resumed and f.last is None
    f.interval = longest_s if first_of_resumed else shortest_s
    f.last, f.runs, f.quiet = key, runs, first_of_resumed


def after_quiet(f: Following, *, longest_s: float, starting_s: float, on_its_way: bool) -> None:
    """A poll found nothing new: the wait grows by half, up to ``longest_s`` for a deployment
    running or ended, up to ``starting_s`` for one on its way to running (seen soon after it
    gets there, as it is created)."""
    if on_its_way:
        f.interval = min(f.interval * 1.5, starting_s)
    else:
        f.interval, f.quiet = min(f.interval * 1.5, longest_s), True
