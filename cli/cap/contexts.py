"""``dmsgw cap new``, ``show`` (``list``) and ``anchor`` (``remove``): the context files.

A context is never overwritten by ``new``; ``show`` needs no key (the file names its DID, and
anchors are not signed by it); ``anchor`` creates a missing context when its key exists, and
refuses a provide anchor the context could never delegate from
(:meth:`~dmsgw.keys.ucan.CapabilityContext.explain_provide_anchor`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ...keys.crypto import generate_key_pair, marshal_private_key
from ...keys.keystore import KeyStore, read_passphrase, validate_key_name
from ...keys.trust import Provider, provider_from_private_key
from ...keys.ucan import CapabilityContext, Token, TokenList, load_context, save_context
from ...keys.ucan.cap import Capability
from ...keys.ucan.token import Reason
from .common import (
    DEFAULT_CONTEXT,
    CapCliError,
    cap_dir,
    context_file,
    existing_context_file,
    note,
    one_stdin,
    parse_did,
    read_clock,
    read_file,
    token_args,
    unlock,
    when,
)


def _create_key(store: KeyStore, name: str) -> Provider:
    key = generate_key_pair()
    store.save(name, marshal_private_key(key), read_passphrase(name, confirm=True))
    note(f"created key {name!r} in {store.keys_dir}")
    return provider_from_private_key(key)


def _anchor_context(args: argparse.Namespace) -> CapabilityContext:
    """The context to anchor in. A missing one is created when its key exists, so that the
    step ``dmsgw whoami`` prints (anchor the DMS's grant) works right after it."""
    directory = cap_dir(args)
    name = args.context
    if context_file(directory, name).is_file():
        return load_context(name, directory=directory, clock=read_clock)
    store = KeyStore(args.key_dir)
    if not store.exists(name):
        raise CapCliError(
            f"no capability context {name!r} in {directory} and no key {name!r} in "
            f"{store.keys_dir} (create both with `dmsgw cap new {name}`)"
        )
    provider = unlock(store, name)
    note(f"creating capability context {name!r} for key {name!r} ({provider.did.uri})")
    return CapabilityContext(provider, name=name, clock=read_clock)


def _depth_text(depth: int) -> str:
    if depth == 0:
        return "unlimited"
    return f"{depth} (at most {depth} token(s) may be chained below it)"


def _caps_text(caps: Sequence[Capability] | None) -> str:
    return ", ".join(caps) if caps else "(none)"


def _token_lines(t: Token, now: int, indent: str, label: str = "") -> list[str]:
    """``t`` and its chain, one field a line; ``label`` (a list number) precedes the first."""
    d = t.dms
    if d is None:
        return [f"{indent}{label}{t.describe()}"]
    pad = indent + " " * len(label) + "    "
    lines = [
        f"{indent}{label}{d.action or '(no action)'}: {d.issuer.uri} -> {d.subject.uri}",
        f"{pad}caps      {_caps_text(d.capability)}",
    ]
    if d.topic:
        lines.append(f"{pad}topics    {_caps_text(d.topic)}")
    lines += [
        f"{pad}audience  {d.audience.uri or 'any'}",
        f"{pad}expires   {when(d.expire, now)}",
        f"{pad}depth     {_depth_text(d.depth)}",
    ]
    if d.chain is not None:
        lines.append(f"{pad}chained on")
        lines += _token_lines(d.chain, now, pad + "  ")
    return lines


def _context_text(ctx: CapabilityContext, path: Path) -> str:
    now = read_clock()
    roots, require, provide, revoke = ctx.list_roots()
    lines = [f"context  {ctx.name}  ({path})", f"DID      {ctx.did.uri}"]
    lines += ["", f"roots ({len(roots)})", *(f"  {r.uri}" for r in roots)]
    for kind, tokens in (("require", require), ("provide", provide), ("revoke", revoke)):
        present = tokens.present()
        lines += ["", f"{kind} ({len(present)})"]
        for i, t in enumerate(present, start=1):
            lines += _token_lines(t, now, "  ", f"{i}. ")
    return "\n".join(lines)


def _anchor_entries(ctx: CapabilityContext) -> dict[tuple[str, bytes], str]:
    """Every anchor by kind and identity (its JSON), with its description."""
    roots, require, provide, revoke = ctx.list_roots()
    entries = {("root", r.uri.encode()): r.uri for r in roots}
    for kind, tokens in (("require", require), ("provide", provide), ("revoke", revoke)):
        entries.update({(kind, t.to_json()): t.describe() for t in tokens.present()})
    return entries


def cmd_new(args: argparse.Namespace) -> int:
    name = validate_key_name(args.name)
    directory = cap_dir(args)
    path = context_file(directory, name)
    if path.exists():
        raise CapCliError(
            f"a capability context named {name!r} already exists ({path}); refusing to overwrite "
            "it (its anchors would be lost)"
        )
    store = KeyStore(args.key_dir)
    if store.exists(name):
        provider = unlock(store, name)
        note(f"using key {name!r} in {store.keys_dir}")
    else:
        provider = _create_key(store, name)
    ctx = CapabilityContext(provider, name=name, clock=read_clock)
    note(f"created capability context {name!r} in {save_context(ctx, directory=directory)}")
    print(provider.did.uri)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.name and args.context and args.name != args.context:
        raise CapCliError(f"two contexts named: {args.name!r} and --context {args.context!r}")
    name = args.name or args.context or DEFAULT_CONTEXT
    directory = cap_dir(args)
    path = existing_context_file(directory, name)
    if args.json:
        sys.stdout.write(read_file(str(path), "context").decode())
        return 0
    print(_context_text(load_context(name, directory=directory, clock=read_clock), path))
    return 0


def _check_provide_anchors(ctx: CapabilityContext, provide: TokenList | None) -> None:
    for t in provide.present() if provide is not None else ():
        refusal = ctx.explain_provide_anchor(t)
        if refusal is not None:
            hint = " (wrong --context?)" if refusal.reason == Reason.WRONG_SUBJECT else ""
            raise CapCliError(refusal.message + hint)


def cmd_anchor(args: argparse.Namespace) -> int:
    one_stdin([*(args.require or ()), *(args.provide or ()), *(args.revoke or ())])
    roots = tuple(parse_did(r, "root") for r in args.root or ())
    require = token_args(args.require, "--require")
    provide = token_args(args.provide, "--provide")
    revoke = token_args(args.revoke, "--revoke")
    if not (roots or require or provide or revoke):
        raise CapCliError("give at least one of --root, --require, --provide or --revoke")
    ctx = _anchor_context(args)
    before = _anchor_entries(ctx)
    if args.remove:
        ctx.remove_roots(roots, require, provide, revoke)
    else:
        _check_provide_anchors(ctx, provide)
        ctx.add_roots(roots, require, provide, revoke)
    after = _anchor_entries(ctx)
    if after == before:
        if args.remove:
            raise CapCliError(f"none of the given anchors is in context {ctx.name!r}")
        print(f"context {ctx.name!r} unchanged: it already holds these anchors (or wider ones)")
        return 0
    for key in sorted(before.keys() - after.keys()):
        print(f"- {key[0]:<8} {before[key]}")
    for key in sorted(after.keys() - before.keys()):
        print(f"+ {key[0]:<8} {after[key]}")
    print(f"saved {save_context(ctx, directory=cap_dir(args), clock=read_clock)}")
    return 0
