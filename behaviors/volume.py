"""Payloads of ``/dms/volume/*`` (``dms/node/behaviors_volume.go``): GlusterFS volumes."""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, STRING, GoStruct, go_field

__all__ = [
    "CreateVolumeRequest",
    "CreateVolumeResponse",
    "DeleteVolumeRequest",
    "DeleteVolumeResponse",
    "StartVolumeRequest",
    "StartVolumeResponse",
]


@dataclasses.dataclass(frozen=True, slots=True)
class CreateVolumeRequest(GoStruct):
    """``client_pem`` is the client certificate's PEM text (the CLI reads it from a file)."""

    GO_NAME = "CreateVolumeRequest"
    name: str = go_field("name", STRING, default="")
    client_pem: str = go_field("client_pem", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class CreateVolumeResponse(GoStruct):
    """``ca_data`` is the CA certificate clients need to mount the volume."""

    GO_NAME = "CreateVolumeResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    ca_data: str = go_field("ca_data", STRING, default="")
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteVolumeRequest(GoStruct):
    """Only the DID that created the volume may delete it."""

    GO_NAME = "DeleteVolumeRequest"
    name: str = go_field("name", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteVolumeResponse(GoStruct):
    GO_NAME = "DeleteVolumeResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class StartVolumeRequest(GoStruct):
    GO_NAME = "StartVolumeRequest"
    name: str = go_field("name", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class StartVolumeResponse(GoStruct):
    GO_NAME = "StartVolumeResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("error", STRING, omitempty=True, default="")
