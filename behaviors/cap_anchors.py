"""Payloads of ``/dms/cap/*`` (``dms/node/behaviors_cap.go``): a DMS's capability anchors.

The newest DMS anchors one kind at a time (``/dms/cap/{provide,require,revoke}/anchor``, each
with a ``CapTokenAnchorRequest``); v0.5 had a single ``/dms/cap/anchor`` taking all kinds at
once (``CapAnchorRequest``). Both reply with ``CapAnchorResponse``.
"""

from __future__ import annotations

import dataclasses

from ..gojson import BOOL, STRING, GoStruct, SliceOf, StructOf, go_field
from ..keys.did import DID
from ..keys.ucan.token import TokenList

__all__ = [
    "CapAnchorRequest",
    "CapAnchorResponse",
    "CapListRequest",
    "CapListResponse",
    "CapTokenAnchorRequest",
]


@dataclasses.dataclass(frozen=True, slots=True)
class CapListRequest(GoStruct):
    GO_NAME = "CapListRequest"
    context: str = go_field("Context", STRING, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class CapListResponse(GoStruct):
    """The anchors of the DMS's capability context: root DIDs and token lists."""

    GO_NAME = "CapListResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")
    roots: tuple[DID, ...] | None = go_field("Roots", SliceOf(StructOf(DID)), default=None)
    require: TokenList = go_field("Require", StructOf(TokenList), default=TokenList())
    provide: TokenList = go_field("Provide", StructOf(TokenList), default=TokenList())
    revoke: TokenList = go_field("Revoke", StructOf(TokenList), default=TokenList())


@dataclasses.dataclass(frozen=True, slots=True)
class CapAnchorRequest(GoStruct):
    """v0.5 ``/dms/cap/anchor``: add root DIDs and require/provide/revoke tokens at once."""

    GO_NAME = "CapAnchorRequest"
    root: tuple[DID, ...] | None = go_field("Root", SliceOf(StructOf(DID)), default=None)
    require: TokenList = go_field("Require", StructOf(TokenList), default=TokenList())
    provide: TokenList = go_field("Provide", StructOf(TokenList), default=TokenList())
    revoke: TokenList = go_field("Revoke", StructOf(TokenList), default=TokenList())


@dataclasses.dataclass(frozen=True, slots=True)
class CapTokenAnchorRequest(GoStruct):
    """Tokens for one anchor kind, the kind being given by the behavior invoked."""

    GO_NAME = "CapTokenAnchorRequest"
    token: TokenList = go_field("Token", StructOf(TokenList), default=TokenList())


@dataclasses.dataclass(frozen=True, slots=True)
class CapAnchorResponse(GoStruct):
    GO_NAME = "CapAnchorResponse"
    ok: bool = go_field("OK", BOOL, default=False)
    error: str = go_field("Error", STRING, default="")
