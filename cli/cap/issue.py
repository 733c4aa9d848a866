"""``dmsgw cap grant``, ``delegate`` and ``revoke``: issuing tokens, printed as ``nunet`` does.

The options are read here; whether a token may be issued is decided in ``keys/ucan``
(:mod:`~dmsgw.keys.ucan.expiry`, :meth:`~dmsgw.keys.ucan.CapabilityContext.explain_delegate`),
which refuses, with the reason, what ``nunet`` would issue without a word and nobody could use.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ...behaviors.units import parse_go_duration
from ...errors import DmsgwError
from ...keys.did import DID
from ...keys.keystore import KeyStore
from ...keys.ucan import (
    Action,
    CapabilityContext,
    NotAuthorizedError,
    SelfSign,
    TokenList,
    load_context,
    save_context,
)
from ...keys.ucan.cap import Capability
from ...keys.ucan.expiry import (
    ExpiryError,
    check_revocable,
    expiry_after,
    future_expiry,
    parse_expiry,
)
from .common import (
    CapCliError,
    cap_dir,
    capabilities,
    existing_context_file,
    note,
    parse_did,
    read_clock,
    read_input,
    read_tokens,
    unlock,
    when,
)

_MAX_DEPTH = (1 << 64) - 1


def _audience(text: str | None) -> DID:
    """``--audience``, else the empty DID: the token may then be used on anyone."""
    return parse_did(text, "audience") if text else DID()


def _required_caps(values: Sequence[str] | None) -> tuple[Capability, ...]:
    """``--cap``, which must name something: a token for nothing authorizes nothing."""
    caps = capabilities(values, "--cap")
    if not caps:
        raise CapCliError("no --cap given: name the capabilities to hand out, e.g. --cap /dms/node")
    return caps


def _depth(value: int) -> int:
    """``--depth``, a Go ``uint64`` as in ``nunet``: outside that range no token can hold it."""
    if not 0 <= value <= _MAX_DEPTH:
        raise CapCliError(f"--depth {value}: must be between 0 (unlimited) and {_MAX_DEPTH}")
    return value


def _expiry(args: argparse.Namespace) -> int:
    """The token's expiry from ``--expiry`` or ``--duration``."""
    now = read_clock()
    if args.expiry is not None:
        try:
            return future_expiry(parse_expiry(args.expiry), now)
        except ExpiryError as exc:
            raise CapCliError(f"--expiry {args.expiry!r}: {exc}") from None
    try:
        duration = parse_go_duration(args.duration)
    except DmsgwError as exc:
        raise CapCliError(f"--duration: {exc}") from None
    try:
        return expiry_after(now, duration)
    except ExpiryError as exc:
        raise CapCliError(f"--duration {args.duration!r}: {exc}") from None


def _print_tokens(tokens: TokenList) -> None:
    """Exactly ``nunet``'s output: the Go JSON of the token list on one line; then a note per
    token, naming the grant it is chained on (a delegation chained on several provide anchors
    issues one token per anchor, alike but for that)."""
    print(tokens.to_json().decode())
    now = read_clock()
    for t in tokens.present():
        chain = t.dms.chain if t.dms is not None else None
        source = f", chained on a grant from {chain.issuer().uri}" if chain is not None else ""
        note(f"issued {t.describe()}{source}, expiring {when(t.expire(), now)}")


def _signing_context(args: argparse.Namespace) -> CapabilityContext:
    """The context with its key, to issue tokens; the file must belong to that key."""
    directory = cap_dir(args)
    existing_context_file(directory, args.context)
    provider = unlock(KeyStore(args.key_dir), args.context)
    return load_context(args.context, provider, directory=directory, clock=read_clock)


def cmd_grant(args: argparse.Namespace) -> int:
    subject = parse_did(args.subject, "subject")
    audience = _audience(args.audience)
    caps = _required_caps(args.cap)
    topics = capabilities(args.topic, "--topic")
    depth = _depth(args.depth)
    expire = _expiry(args)
    ctx = _signing_context(args)
    _print_tokens(ctx.grant(Action.DELEGATE, subject, audience, topics, expire, depth, caps))
    return 0


def _no_anchor_allows(
    ctx: CapabilityContext,
    audience: DID,
    topics: Sequence[Capability],
    expire: int,
    caps: Sequence[Capability],
) -> CapCliError:
    """The error for a delegation that no provide anchor allows: the rule each anchor breaks,
    or, with none, how to get one."""
    anchors = ctx.provide_anchors()
    if not anchors:
        return CapCliError(
            f"context {ctx.name!r} has no provide anchor to delegate from (add one with "
            f"`dmsgw cap anchor --context {ctx.name} --provide …`, or issue your own token "
            "with --self-sign only)"
        )
    why = "; ".join(r.message for r in ctx.explain_delegate(audience, topics, expire, caps))
    return CapCliError(f"no provide anchor of context {ctx.name!r} allows this delegation: {why}")


def cmd_delegate(args: argparse.Namespace) -> int:
    subject = parse_did(args.subject, "subject")
    audience = _audience(args.audience)
    caps = _required_caps(args.cap)
    topics = capabilities(args.topic, "--topic")
    depth = _depth(args.depth)
    self_sign = SelfSign[args.self_sign.upper()]
    if args.auto_expire and self_sign != SelfSign.NO:
        raise CapCliError(
            "--auto-expire makes each token expire with its provide anchor; a self-signed "
            "token has none: give --duration or --expiry with --self-sign also|only"
        )
    expire = 0 if args.auto_expire else _expiry(args)
    ctx = _signing_context(args)
    try:
        tokens = ctx.delegate(subject, audience, topics, expire, depth, caps, self_sign)
    except NotAuthorizedError:
        raise _no_anchor_allows(ctx, audience, topics, expire, caps) from None
    _print_tokens(tokens)
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    tokens = read_tokens(read_input(args.tokens, "TOKENS"), "TOKENS")
    ctx = _signing_context(args)
    now = read_clock()
    revocations = []
    for t in tokens.present():
        check_revocable(t, now)
        revocations.append(ctx.revoke(t))
    ctx.add_roots(revoke=TokenList.of(revocations))
    path = save_context(ctx, directory=cap_dir(args), clock=read_clock)
    for r in revocations:
        print(r.to_json().decode())
    note(
        f"added to the revoke anchors of {path}; a verifier with another context needs them "
        "too: `dmsgw cap anchor --revoke` or `nunet cap anchor --revoke` (one token each)"
    )
    return 0
