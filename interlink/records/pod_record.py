"""What the gateway keeps of a pod: its :class:`PodRecord` (persisted before every transition
is acted on), the :class:`Phase` it is in, the :class:`PodPolicy` that times its life, and the
``/status`` entry a record reads as (:func:`snapshot_of`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import json
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from ... import __version__
from ...behaviors.deployment import DeploymentStatusResponse
from ...behaviors.status import DeploymentStatus, EnsembleManifest
from ...clock import NS_PER_SECOND
from ..translate import METADATA_GENERATION, METADATA_POD_UID
from ..wire.bodies import PodStatus, RetrievedPodData
from .container_runs import Runs
from .pod_status import LiveAllocation, container_statuses, pod_status, waiting_statuses
from .snapshots import Shown

POD_UID_KEY = METADATA_POD_UID
ATTEMPT_KEY = METADATA_GENERATION  # one deployment per attempt: its generation
INCARNATION_KEY = "dmsgw.io/incarnation"
"""Ensemble metadata: when the gateway took the pod on (its record's ``created_ns``). A pod
made again with the UID of one deleted before counts its attempts from 1 again: only this
tells its ensembles from the old pod's (decision 70)."""
DEPLOYMENT_LOST = "DeploymentLost"
"""``PodRecord.reason`` of a pod whose deployment the DMS no longer knows."""
INIT_CONTAINER_FAILED = "InitContainerFailed"
"""``PodRecord.reason`` of a pod that an init container's failure ended (``restartPolicy:
Never``) while the DMS was still provisioning its deployment."""


class Phase:
    """Where a pod is in its life (stored as text)."""

    PENDING = "pending"  # recorded, no attempt yet (a create now records its first at once)
    QUEUED = "queued"  # ``attempt`` waits for DMS capacity (reason, message: why)
    DEPLOYING = "deploying"  # deployment/new under way for ``attempt``
    RUNNING = "running"  # an ensemble exists; following it
    BACKOFF = "backoff"  # ended; waiting to redeploy (restartPolicy)
    TERMINAL = "terminal"  # ended for good (or failed before deploying)
    ENDING = "ending"  # ended for good (an init container failed); shutting the ensemble down
    DELETING = "deleting"  # shutting the ensemble down


TERMINAL_DMS = {DeploymentStatus.COMPLETED, DeploymentStatus.FAILED}
ENDED_PHASES = frozenset({Phase.TERMINAL, Phase.ENDING})
"""The phases of a pod that has ended for good: its ``/status`` entry is final."""


@dataclasses.dataclass
class PodRecord:
    """What is persisted of a pod (msgpack map; unknown keys ignored, missing defaulted)."""

    uid: str
    namespace: str
    name: str
    jid: str
    request: bytes  # the RetrievedPodData JSON interLink sent
    phase: str = Phase.PENDING
    attempt: int = 0
    restarts: int = 0
    ensemble_id: str = ""
    previous_ensemble_id: str = ""  # the ensemble before the last restart (logs --previous)
    dms_status: str = ""
    reason: str = ""
    message: str = ""
    created_ns: int = 0
    started_ns: int = 0
    finished_ns: int = 0
    running_ns: int = 0  # when the current ensemble was first seen Running (0: not yet)
    backoff: int = 0  # restarts in a row, none after a run of restart_reset_s: the back-off
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)
    runs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Container name -> its runs, restarts and last run's end (:meth:`Runs.to_map`)."""

    def to_map(self) -> dict[str, Any]:
        """The map to persist. It shares the record's ``observed`` and ``runs`` (the store
        packs it at once): ``dataclasses.asdict`` copied them deeply, a call for every value
        nested in them, at every save."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    @classmethod
    def from_map(cls, value: Mapping[str, Any]) -> PodRecord:
        fields = {k: v for k, v in value.items() if k in _FIELD_NAMES}
        if not isinstance(fields.get("runs", {}), dict):
            fields["runs"] = {}  # a garbled ledger reads as empty, as a garbled entry of it does
        return cls(**fields)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(PodRecord))


@dataclasses.dataclass(frozen=True)
class PodPolicy:
    """Timings of a pod's life; tests shrink them."""

    poll_min_s: float = 0.5
    poll_max_s: float = 5.0
    retry_min_s: float = 1.0
    retry_max_s: float = 60.0
    restart_min_s: float = 10.0
    restart_max_s: float = 300.0
    restart_reset_s: float = 600.0
    """A deployment that ran this long resets the restart back-off (as the kubelet's does)."""
    deploy_timeout_s: float = 120.0


DEFAULT_POLICY = PodPolicy()


Snapshot = Callable[[PodRecord], PodStatus]
"""How a record reads as its ``/status`` entry (:func:`snapshot_of` as of some clock)."""


def request_data(record: PodRecord) -> RetrievedPodData:
    """The ``/create`` body the record keeps (it was valid when stored)."""
    return parsed_request(record.request)


PARSED_REQUESTS = 256
"""How many pods' parsed requests are kept: 10,000 pods do not keep 10,000 parsed copies."""
_parsed: collections.OrderedDict[bytes, RetrievedPodData] = collections.OrderedDict()
_PARSED_LOCK = threading.Lock()
"""The cache is read on the loop and by a restart's worker thread (the ended pods' snapshots):
an ``OrderedDict`` reordered from two threads at once can lose its order or raise."""


def parsed_request(request: bytes) -> RetrievedPodData:
    """A pod's stored body is read on every snapshot and restart decision, and never changes:
    parse it once (the most recently read are kept). It was checked as a ``/create`` body when
    it was stored, and stored as the model writes it: the model reads it back without those
    checks again (faster: bench/README.md, "A pod's /status entry"; every resumed pod misses
    once)."""
    with _PARSED_LOCK:
        data = _parsed.get(request)
        if data is not None:
            _parsed.move_to_end(request)
            return data
    return remember_request(request, RetrievedPodData.model_validate_json(request))


def remember_request(request: bytes, data: RetrievedPodData) -> RetrievedPodData:
    """Keep ``data`` as what ``request`` (the JSON ``data`` writes) reads back as: a create
    hands on the body it parsed and checked instead of parsing the stored copy again (the
    model reads its own JSON back as an equal model)."""
    with _PARSED_LOCK:
        _parsed[request] = data
        _parsed.move_to_end(request)
        if len(_parsed) > PARSED_REQUESTS:
            _parsed.popitem(last=False)
    return data


def _shown_status(record: PodRecord) -> str:
    """The deployment status a record's snapshot reads (nothing heard yet: preparing)."""
    if record.phase == Phase.TERMINAL and record.reason == "ProviderFailed":
        return DeploymentStatus.FAILED.go_name
    return record.dms_status or DeploymentStatus.PREPARING.go_name


SHOWN_KEY = "shown"
"""Beside a stored record: its ``/status`` entry, as ``[shown_by(record), *entry.to_stored()]``
(:class:`~dmsgw.interlink.records.snapshots.Shown`)."""


@functools.cache
def _build() -> bytes:
    """This gateway's code, as a digest of its sources: a snapshot stored by a gateway whose
    code differs in any way (another version, or a patched one) is made again, not trusted."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.blake2b(__version__.encode(), digest_size=16)
    for source in _sources(root):
        digest.update(source.relative_to(root).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.digest()


def _sources(package: Path) -> list[Path]:
    """The modules of ``package`` and of its sub-packages (not what else lies in the
    directory, such as a checkout's virtual environment), in a fixed order."""
    sources = sorted(package.glob("*.py"))
    for directory in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        sources += _sources(directory)
    return sources


Kept = tuple[bytes, Shown]
"""A ``/status`` entry kept with its record, and the record's :func:`shown_by` it was made of."""


def entry_of(
    record: PodRecord, snapshot: Callable[[PodRecord], PodStatus], digest: bytes | None = None
) -> Kept:
    """The record's ``/status`` entry, made by ``snapshot``, with the digest it was made of
    (``digest``, when the caller has just taken it)."""
    return digest or shown_by(record), Shown.of(snapshot(record))


def stored(record: PodRecord, kept: Kept) -> dict[str, Any]:
    """The map ``record`` is stored as, with its ``/status`` entry beside it
    (:func:`kept_snapshot` reads it back)."""
    value = record.to_map()
    value[SHOWN_KEY] = [kept[0], *kept[1].to_stored()]
    return value


def kept_snapshot(value: Mapping[str, Any], record: PodRecord) -> Kept | None:
    """The ``/status`` entry stored with ``record`` (:data:`SHOWN_KEY`), with the record's
    digest, if it is what this gateway would make of the record (``None``: make it again).
    Making every resumed pod's snapshot again was a good part of a restart's time
    (bench/README.md, "A restart's resume"); the entry is taken as stored, not read back as a
    model, and the digest goes to the pod's actor, which needs it too."""
    kept, digest = value.get(SHOWN_KEY), shown_by(record)
    if not (isinstance(kept, list) and kept and kept[0] == digest):
        return None
    shown = Shown.from_stored(kept[1:])
    return (digest, shown) if shown is not None and _entry_of(shown.wire, record.uid) else None


_PHASES = frozenset(value for name, value in vars(Phase).items() if name.isupper())


def read_stored(value: Mapping[str, Any]) -> tuple[PodRecord, Kept | None]:
    """A stored pod: its record, and the ``/status`` entry kept with it
    (:func:`kept_snapshot`). What cannot be a pod's record raises ``TypeError`` or
    ``ValueError``, which has the store set it aside instead of stopping the gateway."""
    record = PodRecord.from_map(value)
    if not (isinstance(record.uid, str) and record.uid):
        raise ValueError("it names no pod UID")
    if record.phase not in _PHASES:
        raise ValueError(f"unknown phase {record.phase!r}")
    if not isinstance(record.request, bytes):
        raise TypeError("its pod's request is not bytes")
    return record, kept_snapshot(value, record)


def _entry_of(wire: bytes, uid: str) -> bool:
    """Whether ``wire`` reads as a ``/status`` entry of pod ``uid``: a stored entry is sent as
    it is, and a garbled one would spoil every reply it is part of (a third of the cost of
    reading it back as the model)."""
    try:
        entry = json.loads(wire)
    except ValueError:
        return False
    return isinstance(entry, dict) and entry.get("UID") == uid and bool(entry.get("containers"))


def shown_by(record: PodRecord) -> bytes:
    """A digest of all that :func:`snapshot_of` reads of ``record``: two records with the
    same digest read as the same ``/status`` entry (up to the time standing in for times no
    run knows, which a snapshot kept then fixes, as an ended pod's ``finished_ns`` does). A
    pod on its way to Running saved four records that read as two entries; this digest costs
    a small fraction of a snapshot (bench/README.md, "A pod's /status entry"). The digest
    names this gateway's code too: a
    snapshot kept with the record (:func:`kept_snapshot`) is one this code would make."""
    final = record.phase in ENDED_PHASES
    inputs = (
        _build(),
        record.request,
        record.jid,
        _shown_status(record),
        record.observed,
        record.runs,
        record.message,
        record.reason if record.phase == Phase.QUEUED else "",
        final,
        record.finished_ns if final else 0,
    )
    return hashlib.blake2b(msgpack.packb(inputs, use_bin_type=True), digest_size=16).digest()


def snapshot_of(record: PodRecord, *, now_ns: int) -> PodStatus:
    """The ``/status`` entry for a pod record: its containers as Kubernetes sees them. It
    reads what :func:`shown_by` digests, and nothing else of the record."""
    pod = request_data(record).pod
    status = _shown_status(record)
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    runs = {c.name: Runs.from_map(record.runs.get(c.name)) for c in containers}
    seen = {name: own.observation() for name, own in runs.items()}
    if record.phase == Phase.QUEUED and record.reason:  # not told to wait: as if deploying
        waiting = waiting_statuses(pod, record.reason, record.message, seen)
        return pod_status(pod, record.jid, waiting)
    manifest = (
        EnsembleManifest.from_json(json.dumps(record.observed["manifest"]))
        if record.observed.get("manifest")
        else None
    )
    # A time that no run knows reads, for a pod that has ended, as when it ended: a later
    # snapshot (a restarted gateway's) reports the same.
    if record.phase in ENDED_PHASES and record.finished_ns:
        now_ns = record.finished_ns
    statuses = container_statuses(
        pod,
        status,
        manifest,
        now=datetime.fromtimestamp(now_ns / NS_PER_SECOND, UTC),
        allocation_info=live_allocations(record.observed),
        observations=seen,
        error=record.message or _text(record.observed.get("error")),
        final=record.phase in ENDED_PHASES,
    )
    return pod_status(pod, record.jid, statuses)


class _Live(NamedTuple):
    """The fields of an allocation's live state that a status reads (their Go keys)."""

    allocation_id: str
    status: str
    health: str


def kept_reply(reply: DeploymentStatusResponse) -> dict[str, Any]:
    """What a record keeps of a ``deployment/status`` reply: what its snapshot reads (the
    status, the error, three fields of each allocation's live state), under the reply's own
    Go keys. Not the whole reply: its usage figures and heartbeats, which nothing reads
    (``/metrics`` asks the DMS anew), cost memory in every pod, and writing them out and
    reading them back a good part of a create (bench/README.md, "Memory per pod")."""
    kept: dict[str, Any] = {"status": reply.status, "error": reply.error}
    if reply.allocation_info:
        kept["allocation_info"] = {
            key: {field: getattr(info, field) for field in _Live._fields}
            for key, info in reply.allocation_info.items()
        }
    return kept


def live_allocations(observed: Mapping[str, Any]) -> dict[str, LiveAllocation]:
    """The ``allocation_info`` of the stored reply (:func:`kept_reply`; an earlier gateway
    kept the whole reply, under the same keys), read as it is: not decoded as the DMS's
    ``AllocationInfo`` again (a quarter of a snapshot)."""
    listed = observed.get("allocation_info")
    if not isinstance(listed, dict):
        return {}
    return {
        key: _Live(*(_text(entry.get(field)) for field in _Live._fields))
        for key, entry in listed.items()
        if isinstance(entry, dict)
    }


def _text(value: object) -> str:
    """A stored string field; anything else (absent, garbled) reads as Go's zero value."""
    return value if isinstance(value, str) else ""


def plain_reply(reply: Any) -> dict[str, Any]:
    """A reply as a plain map, to persist what was last observed. Every pod keeps one, with
    the same two dozen keys: they are interned, not a copy of each per pod (bench/README.md,
    "Memory per pod")."""
    raw = reply.to_json() if hasattr(reply, "to_json") else b"{}"
    value = json.loads(raw, object_pairs_hook=_interned)
    return value if isinstance(value, dict) else {}


def _interned(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {sys.intern(key): value for key, value in pairs}
