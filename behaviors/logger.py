"""Payloads of ``/dms/node/logger/config`` (``dms/node/behaviors_general.go``)."""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, INT64, STRING, GoStruct, Ptr, go_field

__all__ = ["LoggerConfigRequest", "LoggerConfigResponse"]


@dataclasses.dataclass(frozen=True, slots=True)
class LoggerConfigRequest(GoStruct):
    """Only the settings given are changed; ``interval`` is the flush period in seconds.

    ``elastic_enabled`` is a Go ``*bool``: ``None`` leaves the setting alone, ``False`` turns
    Elasticsearch logging off.
    """

    GO_NAME = "LoggerConfigRequest"
    interval: int = go_field("interval", INT64, omitempty=True, default=0)
    url: str = go_field("url", STRING, omitempty=True, default="")
    level: str = go_field("level", STRING, omitempty=True, default="")
    api_key: str = go_field("api_key", STRING, omitempty=True, default="")
    apm_url: str = go_field("apm_url", STRING, omitempty=True, default="")
    elastic_enabled: bool | None = go_field(
        "elastic_enabled", Ptr(BOOL), omitempty=True, default=None
    )


@dataclasses.dataclass(frozen=True, slots=True)
class LoggerConfigResponse(GoStruct):
    GO_NAME = "LoggerConfigResponse"
    error: str = go_field("error", STRING, omitempty=True, default="")
    ok: bool = go_field("OK", BOOL, default=False)
