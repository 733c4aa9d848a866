"""Capability context files (``lib/ucan/store.go``, ``dms/node/cap.go``): ``<dir>/<name>.cap``.

The file is one JSON object ``{"did", "roots", "require", "provide", "revoke"}`` as Go's
``json.Encoder`` writes it (compact, newline-terminated), so ``nunet cap`` and the DMS read what
we write and we read theirs, including files of older DMS versions whose keys were the untagged
Go field names (``DID``, ``Roots``, ...; Go matches keys case-insensitively, and so do we).

Saving keeps the previous file as ``<name>.cap.<unix seconds>``, as the DMS does, but writes the
new file beside it first and renames it into place, so a crash never leaves no context at all.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import tempfile
from pathlib import Path

from ...clock import NS_PER_SECOND, Clock, system_clock
from ...gojson import GoDecodeError, GoStruct, SliceOf, StructOf, go_field
from ..did import DID
from ..trust import Provider
from .context import CapabilityContext
from .token import TokenList, UcanError

__all__ = [
    "CAP_DIR_ENV",
    "CapabilityContextView",
    "StoreError",
    "default_cap_dir",
    "load_context",
    "save_context",
]


CAP_DIR_ENV = "DMSGW_CAP_DIR"


class StoreError(UcanError):
    """A capability context file that cannot be read, parsed, trusted or written."""


@dataclasses.dataclass(frozen=True, slots=True)
class CapabilityContextView(GoStruct):
    """``ucan.CapabilityContextView``: the file's JSON object."""

    GO_NAME = "CapabilityContextView"
    did: DID = go_field("did", StructOf(DID), default=DID())
    roots: tuple[DID, ...] | None = go_field("roots", SliceOf(StructOf(DID)), default=None)
    require: TokenList = go_field("require", StructOf(TokenList), default=TokenList())
    provide: TokenList = go_field("provide", StructOf(TokenList), default=TokenList())
    revoke: TokenList = go_field("revoke", StructOf(TokenList), default=TokenList())


def default_cap_dir() -> Path:
    """``$DMSGW_CAP_DIR``, else ``~/.nunet/cap`` (where ``nunet cap`` and the DMS keep their
    contexts): one rule for every command and ``dmsgw.connect()``, as ``$DMSGW_KEY_DIR`` is
    for keys."""
    chosen = os.environ.get(CAP_DIR_ENV)
    return Path(chosen).expanduser() if chosen else Path.home() / ".nunet" / "cap"


def _path(name: str, directory: Path | None) -> Path:
    return (directory if directory is not None else default_cap_dir()) / f"{name}.cap"


def load_context(
    name: str,
    identity: Provider | DID | None = None,
    *,
    directory: Path | None = None,
    clock: Clock = system_clock,
) -> CapabilityContext:
    """Load ``<directory>/<name>.cap`` (``LoadCapabilityContextWithName``).

    Tokens that have expired are dropped, as the DMS drops them (expired provide anchors are
    kept aside, as the context's ``lapsed``, to name the grant to renew). ``identity`` must be the
    context's own DID's :class:`Provider` to issue tokens from it; without it the context is
    read-only (enough to predict the owner's verdicts). A file for another DID is refused.
    """
    path = _path(name, directory)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        where = "" if directory is None else f" --cap-dir {shlex.quote(str(path.parent))}"
        raise StoreError(
            f"capability context file {path} does not exist (create it with "
            f"`dmsgw cap new {shlex.quote(name)}{where}`)"
        ) from None
    except OSError as exc:
        raise StoreError(f"cannot read capability context file {path}: {exc.strerror}") from None
    try:
        view = CapabilityContextView.from_json(data)
    except GoDecodeError as exc:
        raise StoreError(f"capability context file {path} is not a valid context: {exc}") from None
    if view.did.empty():
        raise StoreError(f"capability context file {path} names no DID")
    if identity is not None:
        own = identity.did if isinstance(identity, Provider) else identity
        if own != view.did:
            raise StoreError(
                f"capability context file {path} belongs to {view.did.uri}, not to {own.uri}"
            )
    now = clock()
    try:
        return CapabilityContext(
            identity if identity is not None else view.did,
            name=name,
            roots=view.roots or (),
            require=_unexpired(view.require, now),
            provide=_unexpired(view.provide, now),
            revoke=_unexpired(view.revoke, now),
            lapsed=TokenList.of(t for t in view.provide.present() if t.expire_before(now)),
            clock=clock,
        )
    except UcanError as exc:
        raise StoreError(f"capability context file {path}: {exc}") from None


def _unexpired(tokens: TokenList, now: int) -> TokenList:
    return TokenList.of(t for t in tokens.present() if not t.expire_before(now))


def save_context(
    ctx: CapabilityContext, *, directory: Path | None = None, clock: Clock = system_clock
) -> Path:
    """Write ``ctx`` to ``<directory>/<ctx.name>.cap`` (mode 0600) and return the path.

    An existing file is first renamed to ``<name>.cap.<unix seconds>`` (``SaveCapabilityContext``).
    """
    path = _path(ctx.name, directory)
    roots, require, provide, revoke = ctx.list_roots()
    view = CapabilityContextView(ctx.did, tuple(roots), require, provide, revoke)
    data = view.to_json() + b"\n"  # json.Encoder terminates the value with a newline
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{ctx.name}.cap.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:  # mkstemp creates it 0600
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if path.exists():
                path.rename(path.with_name(f"{path.name}.{clock() // NS_PER_SECOND}"))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise StoreError(f"cannot save capability context {path}: {exc}") from None
    return path
