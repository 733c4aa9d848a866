"""Payloads of ``/dms/node/deployment/*`` (``dms/node/behaviors_deployment.go``).

Shapes are those of the newest DMS. Where it changed a shape, older DMS replies still decode
(Go matches keys case-insensitively: ``Status``/``status``), with one exception handled
explicitly: the v0.5 ``deployment/list`` reply ``{"Deployments": {id: status}}``, which
:meth:`DeploymentListResponse.from_json` turns into the newest form.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Self

from ..gojson import (
    BOOL,
    INT64,
    STRING,
    GoDecodeError,
    GoStruct,
    MapOf,
    Ptr,
    SliceOf,
    StructOf,
    decode_plain,
    go_field,
    unmarshal,
)
from .ensemble import EnsembleConfig
from .executor_stats import ExecutorStats
from .gotime import GO_TIME, ZERO_TIME
from .resources import Resources
from .status import AllocationInfo, AllocationResourceUsage, EnsembleManifest

__all__ = [
    "AllocationDetails",
    "AllocationLogs",
    "DeploymentDeleteRequest",
    "DeploymentDeleteResponse",
    "DeploymentInfo",
    "DeploymentInfoRequest",
    "DeploymentInfoResponse",
    "DeploymentListRequest",
    "DeploymentListResponse",
    "DeploymentLogsRequest",
    "DeploymentLogsResponse",
    "DeploymentManifestRequest",
    "DeploymentManifestResponse",
    "DeploymentPruneRequest",
    "DeploymentPruneResponse",
    "DeploymentShutdownRequest",
    "DeploymentShutdownResponse",
    "DeploymentStatusRequest",
    "DeploymentStatusResponse",
    "NewDeploymentRequest",
    "NewDeploymentResponse",
    "UpdateDeploymentRequest",
    "UpdateDeploymentResponse",
]


@dataclasses.dataclass(frozen=True, slots=True)
class NewDeploymentRequest(GoStruct):
    """Deploy ``Ensemble``; the envelope must not expire within 59 s (``MinDeploymentTime``)."""

    GO_NAME = "NewDeploymentRequest"
    ensemble: EnsembleConfig = go_field(
        "Ensemble", StructOf(EnsembleConfig), default=EnsembleConfig()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class NewDeploymentResponse(GoStruct):
    """``Status`` is ``"OK"`` with the new ``EnsembleID``, or ``"ERROR"`` with ``Error``.

    The DMS replies as soon as the orchestrator exists; the deployment itself goes on after.
    """

    GO_NAME = "NewDeploymentResponse"
    status: str = go_field("Status", STRING, default="")
    ensemble_id: str = go_field("EnsembleID", STRING, omitempty=True, default="")
    error: str = go_field("Error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateDeploymentRequest(GoStruct):
    """Replace a running ensemble's configuration (expiry at least 118 s ahead)."""

    GO_NAME = "UpdateDeploymentRequest"
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    ensemble: EnsembleConfig = go_field(
        "Ensemble", StructOf(EnsembleConfig), default=EnsembleConfig()
    )


@dataclasses.dataclass(frozen=True, slots=True)
class UpdateDeploymentResponse(GoStruct):
    GO_NAME = "UpdateDeploymentResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentListRequest(GoStruct):
    """Filters, paging and sorting; all optional. ``status`` holds DMS integers
    (:class:`~dmsgw.behaviors.status.DeploymentStatus`), times RFC 3339 text.
    """

    GO_NAME = "DeploymentListRequest"
    metadata: Mapping[str, str] | None = go_field(
        "metadata", MapOf(STRING), omitempty=True, default=None
    )
    limit: int = go_field("limit", INT64, omitempty=True, default=0)
    offset: int = go_field("offset", INT64, omitempty=True, default=0)
    status: tuple[int, ...] | None = go_field(
        "status", SliceOf(INT64), omitempty=True, default=None
    )
    created_after: str | None = go_field(
        "created_after", Ptr(GO_TIME), omitempty=True, default=None
    )
    created_before: str | None = go_field(
        "created_before", Ptr(GO_TIME), omitempty=True, default=None
    )
    updated_after: str | None = go_field(
        "updated_after", Ptr(GO_TIME), omitempty=True, default=None
    )
    updated_before: str | None = go_field(
        "updated_before", Ptr(GO_TIME), omitempty=True, default=None
    )
    sort_by: str = go_field("sort_by", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentInfo(GoStruct):
    """One deployment in a list: its ID (the orchestrator's), status name and times."""

    GO_NAME = "DeploymentInfo"
    orchestrator_id: str = go_field("orchestrator_id", STRING, default="")
    status: str = go_field("status", STRING, default="")
    created_at: str = go_field("created_at", GO_TIME, default=ZERO_TIME)
    updated_at: str = go_field("updated_at", GO_TIME, default=ZERO_TIME)
    completed_at: str | None = go_field("completed_at", Ptr(GO_TIME), omitempty=True, default=None)
    metadata: Mapping[str, str] | None = go_field(
        "metadata", MapOf(STRING), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _LegacyDeploymentList(GoStruct):
    deployments: Mapping[str, str] | None = go_field("Deployments", MapOf(STRING), default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentListResponse(GoStruct):
    GO_NAME = "DeploymentListResponse"
    deployments: tuple[DeploymentInfo, ...] | None = go_field(
        "deployments", SliceOf(StructOf(DeploymentInfo)), default=None
    )
    total: int = go_field("total", INT64, default=0)
    has_more: bool = go_field("has_more", BOOL, default=False)
    next_offset: int = go_field("next_offset", INT64, omitempty=True, default=0)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Also accepts the v0.5 reply (a map of ID to status name), sorted by ID. The newest
        shape is decoded first, parsing the reply once: a listing of many deployments is what
        a gateway following its pods reads every few seconds. A page whose bytes are those of
        a page decoded lately is that page's reply again (the same object): while nothing
        changes, a gateway's listings decode nothing (decision 128)."""
        found = _RECENT_PAGES.get(data)
        if found is None:
            found = cls._decoded(data)
            _RECENT_PAGES.put(data, found)
        return found  # type: ignore[return-value]

    @classmethod
    def _decoded(cls, data: bytes | str) -> Self:
        try:
            return unmarshal(cls, data)
        except GoDecodeError:
            pass  # the v0.5 map (an object where the newest has a list), or not a reply
        raw = decode_plain(data)
        if isinstance(raw, dict) and any(
            key.casefold() == "deployments" and isinstance(value, dict)
            for key, value in raw.items()
        ):
            legacy = unmarshal(_LegacyDeploymentList, data).deployments or {}
            return cls(
                deployments=tuple(
                    DeploymentInfo(orchestrator_id=ident, status=legacy[ident])
                    for ident in sorted(legacy)
                ),
                total=len(legacy),
            )
        return unmarshal(cls, data)


LISTING_MEMO_BYTES = 32 * 1024 * 1024
"""How many bytes of listing pages :class:`RecentPages` remembers (with their replies)."""
LISTING_MEMO_PAGES = 64
"""How many listing pages :class:`RecentPages` remembers: a lookup compares the lengths of
them all."""


class RecentPages:
    """The listing pages decoded lately and their replies, least recent first: at most
    ``budget`` bytes and ``pages`` pages. A reply is immutable, so the one decoded from the
    same bytes can be handed out again. Looked up by comparing the bytes with those of each
    page of the same length, not by a hash: a comparison stops at the first byte that
    differs, where a hash reads every byte of every page. A listing of more pages than fit
    finds none of them at the next (the least recent is forgotten first).
    """

    def __init__(self, budget: int = LISTING_MEMO_BYTES, pages: int = LISTING_MEMO_PAGES) -> None:
        self._budget = budget
        self._most = pages
        self._held = 0
        self._pages: list[tuple[bytes | str, DeploymentListResponse]] = []
        self._lock = threading.Lock()  # clients on event loops of other threads decode too

    def get(self, data: bytes | str) -> DeploymentListResponse | None:
        """The reply decoded from the same bytes, if remembered (now the most recent)."""
        size = len(data)
        with self._lock:
            for i, (page, reply) in enumerate(self._pages):
                if len(page) == size and page == data:
                    self._pages.append(self._pages.pop(i))
                    return reply
        return None

    def put(self, data: bytes | str, reply: DeploymentListResponse) -> None:
        """Remember ``reply`` decoded from ``data``, forgetting the least recent over budget."""
        if len(data) > self._budget:
            return
        with self._lock:
            self._pages.append((data, reply))
            self._held += len(data)
            while self._held > self._budget or len(self._pages) > self._most:
                forgotten, _ = self._pages.pop(0)
                self._held -= len(forgotten)


_RECENT_PAGES = RecentPages()


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentStatusRequest(GoStruct):
    """``include_usage`` asks each running allocation for executor stats (slower)."""

    GO_NAME = "DeploymentStatusRequest"
    id: str = go_field("id", STRING, default="")
    include_usage: bool = go_field("include_usage", BOOL, omitempty=True, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentStatusResponse(GoStruct):
    """``status`` is a :class:`~dmsgw.behaviors.status.DeploymentStatus` name.

    ``allocation_info`` is filled while the deployment runs; ``allocation_usage`` holds the
    executors' stats by allocation (``map[string]*types.ExecutorStats``, newest stored text of
    ``dms/node/behaviors_deployment.go``) when they were asked for; a ``null`` entry is ``None``.
    """

    GO_NAME = "DeploymentStatusResponse"
    status: str = go_field("status", STRING, default="")
    error: str = go_field("error", STRING, default="")
    allocation_info: Mapping[str, AllocationInfo] | None = go_field(
        "allocation_info", MapOf(StructOf(AllocationInfo)), omitempty=True, default=None
    )
    allocation_usage: Mapping[str, ExecutorStats | None] | None = go_field(
        "allocation_usage", MapOf(Ptr(StructOf(ExecutorStats))), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentManifestRequest(GoStruct):
    GO_NAME = "DeploymentManifestRequest"
    id: str = go_field("ID", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentManifestResponse(GoStruct):
    GO_NAME = "DeploymentManifestResponse"
    manifest: EnsembleManifest = go_field(
        "manifest", StructOf(EnsembleManifest), default=EnsembleManifest()
    )
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentInfoRequest(GoStruct):
    """Everything about one deployment in one call; logs are returned as file paths."""

    GO_NAME = "DeploymentInfoRequest"
    id: str = go_field("id", STRING, default="")
    include_usage: bool = go_field("include_usage", BOOL, omitempty=True, default=False)
    include_logs: bool = go_field("include_logs", BOOL, omitempty=True, default=False)
    allocation_names: tuple[str, ...] | None = go_field(
        "allocation_names", SliceOf(STRING), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationLogs(GoStruct):
    """Where the DMS wrote an allocation's logs (paths on the DMS host)."""

    GO_NAME = "AllocationLogs"
    stdout_path: str = go_field("stdout_path", STRING, omitempty=True, default="")
    stderr_path: str = go_field("stderr_path", STRING, omitempty=True, default="")
    logs_written_to: str = go_field("logs_written_to", STRING, omitempty=True, default="")
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationDetails(GoStruct):
    """``AllocationInfo`` plus, on request, executor stats and log paths."""

    GO_NAME = "AllocationDetails"
    allocation_id: str = go_field("allocation_id", STRING, default="")
    status: str = go_field("status", STRING, default="")
    heartbeat_seq: int = go_field("heartbeat_seq", INT64, default=0)
    has_health_check: bool = go_field("has_health_check", BOOL, default=False)
    health: str = go_field("health", STRING, default="")
    resource_limit: Resources = go_field("resource_limit", StructOf(Resources), default=Resources())
    resource_usage: AllocationResourceUsage = go_field(
        "resource_usage", StructOf(AllocationResourceUsage), default=AllocationResourceUsage()
    )
    dns_name: str = go_field("dns_name", STRING, default="")
    ip: str = go_field("ip", STRING, default="")
    timestamp: int = go_field("timestamp", INT64, default=0)
    executor_stats: ExecutorStats | None = go_field(
        "executor_stats", Ptr(StructOf(ExecutorStats)), omitempty=True, default=None
    )
    logs: AllocationLogs | None = go_field(
        "logs", Ptr(StructOf(AllocationLogs)), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentInfoResponse(GoStruct):
    """Everything about one deployment; ``usage`` and each allocation's ``executor_stats`` are
    typed ``*types.ExecutorStats`` (newest stored text of ``dms/node/behaviors_deployment.go``)."""

    GO_NAME = "DeploymentInfoResponse"
    id: str = go_field("id", STRING, default="")
    status: str = go_field("status", STRING, default="")
    error: str = go_field("error", STRING, omitempty=True, default="")
    manifest: EnsembleManifest | None = go_field(
        "manifest", Ptr(StructOf(EnsembleManifest)), omitempty=True, default=None
    )
    allocations: Mapping[str, AllocationDetails] | None = go_field(
        "allocations", MapOf(StructOf(AllocationDetails)), omitempty=True, default=None
    )
    usage: Mapping[str, ExecutorStats | None] | None = go_field(
        "usage", MapOf(Ptr(StructOf(ExecutorStats))), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentLogsRequest(GoStruct):
    GO_NAME = "DeploymentLogsRequest"
    ensemble_id: str = go_field("EnsembleID", STRING, default="")
    allocation_name: str = go_field("AllocationName", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentLogsResponse(GoStruct):
    """The directory, on the DMS host, where ``stdout.log``/``stderr.log`` were written."""

    GO_NAME = "DeploymentLogsResponse"
    logs_written_to: str = go_field("LogsWrittenTo", STRING, default="")
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentShutdownRequest(GoStruct):
    GO_NAME = "DeploymentShutdownRequest"
    id: str = go_field("ID", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentShutdownResponse(GoStruct):
    """``Error`` is ``"deployment is not running"`` unless the deployment was ``Running``."""

    GO_NAME = "DeploymentShutdownResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentPruneRequest(GoStruct):
    """Forget finished deployments created ``before`` (RFC 3339, or ``1h``/``7d`` ago), or
    ``all`` of them.
    """

    GO_NAME = "DeploymentPruneRequest"
    before: str = go_field("before", STRING, omitempty=True, default="")
    all: bool = go_field("all", BOOL, omitempty=True, default=False)


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentPruneResponse(GoStruct):
    GO_NAME = "DeploymentPruneResponse"
    ok: bool = go_field("ok", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentDeleteRequest(GoStruct):
    GO_NAME = "DeploymentDeleteRequest"
    orchestrator_id: str = go_field("orchestrator_id", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeploymentDeleteResponse(GoStruct):
    GO_NAME = "DeploymentDeleteResponse"
    ok: bool = go_field("ok", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")
