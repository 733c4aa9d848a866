"""``dmsgw cap …``: capability contexts in ``nunet cap`` files, and the DMS's verdict offline.

``new``, ``show`` (alias ``list``), ``anchor`` (and ``remove``), ``grant``, ``delegate`` and
``revoke`` read and write the same ``<name>.cap`` files as ``nunet cap``, and print the same
token JSON, so tokens move freely between the two tools. ``check`` is what ``nunet`` lacks: a
DMS drops an unauthorized message without a word, so ``check`` runs the DMS's receive path on
an envelope (or a bare token list) against a model of the DMS's context and says which rule
refuses it.

Where ``nunet`` would quietly do something useless, these commands refuse with a reason
instead: a context is never overwritten, a capability must be a ``/path``, a DID must parse,
an expiry must be in the future, a provide anchor must be a delegation to the context's own
DID, and a single token pasted where a list is expected is read as one token (Go would read
it as an empty list).

Listing, anchoring and checking need no key: the file names its DID and anchors are not
signed. Issuing tokens unlocks the key of the same name (``$DMS_PASSPHRASE`` or a prompt).
Contexts live in ``--cap-dir``, ``$DMSGW_CAP_DIR`` or ``~/.nunet/cap``; keys in ``--key-dir``,
``$DMSGW_KEY_DIR`` or ``~/.nunet/key``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ..behaviors.catalog import CATALOG
from ..behaviors.units import parse_go_duration
from ..clock import NS_PER_SECOND, Clock, system_clock
from ..errors import DmsgwError
from ..gojson import GoDecodeError
from ..gojson.scanner import go_syntax_error
from ..keys.crypto import generate_key_pair, marshal_private_key
from ..keys.did import DID, DIDError, from_string
from ..keys.id import ID
from ..keys.keystore import KeyStore, read_passphrase, validate_key_name
from ..keys.trust import Provider, provider_from_private_key
from ..keys.ucan import (
    Action,
    CapabilityBlobError,
    CapabilityContext,
    NotAuthorizedError,
    SelfSign,
    Token,
    TokenList,
    default_cap_dir,
    load_context,
    save_context,
    unmarshal_token_list,
)
from ..keys.ucan.cap import Capability, CapabilityError, check_capability
from ..keys.ucan.expiry import (
    EXPIRY_FORMATS,
    ExpiryError,
    check_revocable,
    expiry_after,
    future_expiry,
    parse_expiry,
)
from ..keys.ucan.store import CAP_DIR_ENV
from ..keys.ucan.token import Reason, format_second
from ..transport.envelope import Handle
from ..transport.preflight import Stage, Verdict, preflight
from .key import DEFAULT_GATEWAY_KEY

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_DMS_CONTEXT",
    "DMSGW_CAP_DIR_ENV",
    "CapCliError",
    "clock",
    "register",
]

DEFAULT_CONTEXT = DEFAULT_GATEWAY_KEY
"""The gateway's context is named after its key, as every ``nunet`` context is."""
DEFAULT_DMS_CONTEXT = "dms"
DMSGW_CAP_DIR_ENV = CAP_DIR_ENV
EXIT_REFUSED = 1

clock: Clock = system_clock
"""The time every command reads (token expiries, ``check``'s "now"); tests pin it."""

_MAX_DEPTH = (1 << 64) - 1
_ENVELOPE_KEYS = frozenset({"to", "be", "from", "nonce", "opt", "msg", "cap", "sig"})
_TOKEN_KEYS = frozenset({"dms", "ucan"})
_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


class CapCliError(DmsgwError):
    """Input to a ``dmsgw cap`` command that names nothing usable."""


def _note(text: str) -> None:
    """Progress for humans on stderr, so stdout stays pasteable JSON or a DID."""
    print(f"dmsgw: {text}", file=sys.stderr)


# --- parsing values ------------------------------------------------------------------------


def _did(text: str, what: str) -> DID:
    try:
        return from_string(text)
    except DIDError as exc:
        raise CapCliError(f"invalid {what} DID {exc}") from None


def _audience(text: str | None) -> DID:
    return _did(text, "audience") if text else DID()


def _capabilities(values: Sequence[str] | None, flag: str) -> tuple[Capability, ...]:
    """Repeatable and comma-separated, like cobra's string slices."""
    caps = tuple(c.strip() for value in values or () for c in value.split(","))
    for c in caps:
        try:
            check_capability(c)
        except CapabilityError as exc:
            raise CapCliError(f"{flag} {c!r}: {exc}") from None
    return caps


def _required_caps(values: Sequence[str] | None) -> tuple[Capability, ...]:
    caps = _capabilities(values, "--cap")
    if not caps:
        raise CapCliError("no --cap given: name the capabilities to hand out, e.g. --cap /dms/node")
    return caps


def _depth(value: int) -> int:
    if not 0 <= value <= _MAX_DEPTH:
        raise CapCliError(f"--depth {value}: must be between 0 (unlimited) and {_MAX_DEPTH}")
    return value


def _expiry(args: argparse.Namespace) -> int:
    """The token's expiry from ``--expiry`` or ``--duration``."""
    now = clock()
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


# --- reading token JSON --------------------------------------------------------------------


def _read_input(value: str, what: str) -> bytes:
    """``-`` is stdin, ``@path`` a file, anything else the JSON itself."""
    if value == "-":
        return sys.stdin.read().encode()
    if value.startswith("@"):
        return _read_file(value[1:], what)
    return value.encode()


def _read_file(path: str, what: str) -> bytes:
    if path == "-":
        return sys.stdin.read().encode()
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CapCliError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _one_stdin(values: Sequence[str]) -> None:
    if sum(v in ("-", "@-") for v in values) > 1:
        raise CapCliError("only one option can read standard input ('-')")


def _json_keys(data: bytes, what: str) -> frozenset[str]:
    """The top-level keys, case-folded as Go's decoder matches them; syntax errors in Go's
    words, as ``nunet`` would print them."""
    syntax = go_syntax_error(data)
    if syntax is not None:
        raise CapCliError(f"{what} is not valid JSON: {syntax}")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise CapCliError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CapCliError(f"{what} is a JSON {_JSON_KINDS[type(value)]}, not an object")
    return frozenset(k.lower() for k in value)


def _tokens(data: bytes, what: str) -> TokenList:
    """A token list, or one token (what ``nunet cap revoke`` prints): the non-empty list."""
    keys = _json_keys(data, what)
    try:
        if keys & _TOKEN_KEYS:
            tokens = TokenList.of([Token.from_json(data)])
        elif "tok" in keys or not keys:
            tokens = unmarshal_token_list(data)
        else:
            raise CapCliError(
                f'{what} is neither a token list ({{"tok":[…]}}) nor a token ({{"dms":{{…}}}})'
            )
    except GoDecodeError as exc:
        raise CapCliError(f"{what}: unmarshal tokens: {exc}") from None
    if tokens.tokens is None:
        raise CapCliError(f"{what} holds no tokens")
    if None in tokens.tokens:
        raise CapCliError(f"{what} holds a null token")
    return tokens


def _token_args(values: Sequence[str] | None, flag: str) -> TokenList | None:
    """Every value of a repeatable token option, as one list (``None`` when not given)."""
    if not values:
        return None
    lists = [_tokens(_read_input(v, flag), flag) for v in values]
    return TokenList.of(t for tokens in lists for t in tokens.present())


def _print_tokens(tokens: TokenList) -> None:
    """Exactly ``nunet``'s output: the Go JSON of the token list on one line; then a note per
    token, naming the grant it is chained on (a delegation chained on several provide anchors
    issues one token per anchor, alike but for that)."""
    print(tokens.to_json().decode())
    now = clock()
    for t in tokens.present():
        chain = t.dms.chain if t.dms is not None else None
        source = f", chained on a grant from {chain.issuer().uri}" if chain is not None else ""
        _note(f"issued {t.describe()}{source}, expiring {_when(t.expire(), now)}")


# --- contexts and keys ---------------------------------------------------------------------


def _cap_dir(args: argparse.Namespace) -> Path:
    return Path(args.cap_dir).expanduser() if args.cap_dir else default_cap_dir()


def _context_file(directory: Path, name: str) -> Path:
    return directory / f"{validate_key_name(name)}.cap"


def _existing_context_file(directory: Path, name: str) -> Path:
    path = _context_file(directory, name)
    if not path.is_file():
        raise CapCliError(
            f"no capability context {name!r} in {directory} (create it with `dmsgw cap new {name}`)"
        )
    return path


def _unlock(store: KeyStore, name: str) -> Provider:
    store.existing_path(name)  # a missing key is reported before a passphrase is asked for
    return provider_from_private_key(store.priv_key(name, read_passphrase(name, confirm=False)))


def _create_key(store: KeyStore, name: str) -> Provider:
    key = generate_key_pair()
    store.save(name, marshal_private_key(key), read_passphrase(name, confirm=True))
    _note(f"created key {name!r} in {store.keys_dir}")
    return provider_from_private_key(key)


def _signing_context(args: argparse.Namespace) -> CapabilityContext:
    """The context with its key, to issue tokens; the file must belong to that key."""
    directory = _cap_dir(args)
    _existing_context_file(directory, args.context)
    provider = _unlock(KeyStore(args.key_dir), args.context)
    return load_context(args.context, provider, directory=directory, clock=clock)


def _anchor_context(args: argparse.Namespace) -> CapabilityContext:
    """The context to anchor in. A missing one is created when its key exists, so that the
    step ``dmsgw whoami`` prints (anchor the DMS's grant) works right after it."""
    directory = _cap_dir(args)
    name = args.context
    if _context_file(directory, name).is_file():
        return load_context(name, directory=directory, clock=clock)
    store = KeyStore(args.key_dir)
    if not store.exists(name):
        raise CapCliError(
            f"no capability context {name!r} in {directory} and no key {name!r} in "
            f"{store.keys_dir} (create both with `dmsgw cap new {name}`)"
        )
    provider = _unlock(store, name)
    _note(f"creating capability context {name!r} for key {name!r} ({provider.did.uri})")
    return CapabilityContext(provider, name=name, clock=clock)


# --- describing tokens and contexts --------------------------------------------------------


def _span(ns: int) -> str:
    """A duration for humans, to the two largest units: ``364d 23h``, ``5m 3s``."""
    seconds = ns // NS_PER_SECOND
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2]) or "0s"


def _when(expire: int, now: int) -> str:
    moment = format_second(expire)
    if expire >= now:
        return f"{moment} (in {_span(expire - now)})"
    return f"{moment} (expired {_span(now - expire)} ago)"


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
        f"{pad}expires   {_when(d.expire, now)}",
        f"{pad}depth     {_depth_text(d.depth)}",
    ]
    if d.chain is not None:
        lines.append(f"{pad}chained on")
        lines += _token_lines(d.chain, now, pad + "  ")
    return lines


def _context_text(ctx: CapabilityContext, path: Path) -> str:
    now = clock()
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


# --- handlers ------------------------------------------------------------------------------


def cmd_new(args: argparse.Namespace) -> int:
    name = validate_key_name(args.name)
    directory = _cap_dir(args)
    path = _context_file(directory, name)
    if path.exists():
        raise CapCliError(
            f"a capability context named {name!r} already exists ({path}); refusing to overwrite "
            "it (its anchors would be lost)"
        )
    store = KeyStore(args.key_dir)
    if store.exists(name):
        provider = _unlock(store, name)
        _note(f"using key {name!r} in {store.keys_dir}")
    else:
        provider = _create_key(store, name)
    ctx = CapabilityContext(provider, name=name, clock=clock)
    _note(f"created capability context {name!r} in {save_context(ctx, directory=directory)}")
    print(provider.did.uri)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.name and args.context and args.name != args.context:
        raise CapCliError(f"two contexts named: {args.name!r} and --context {args.context!r}")
    name = args.name or args.context or DEFAULT_CONTEXT
    directory = _cap_dir(args)
    path = _existing_context_file(directory, name)
    if args.json:
        sys.stdout.write(_read_file(str(path), "context").decode())
        return 0
    print(_context_text(load_context(name, directory=directory, clock=clock), path))
    return 0


def _check_provide_anchors(ctx: CapabilityContext, provide: TokenList | None) -> None:
    for t in provide.present() if provide is not None else ():
        refusal = ctx.explain_provide_anchor(t)
        if refusal is not None:
            hint = " (wrong --context?)" if refusal.reason == Reason.WRONG_SUBJECT else ""
            raise CapCliError(refusal.message + hint)


def cmd_anchor(args: argparse.Namespace) -> int:
    _one_stdin([*(args.require or ()), *(args.provide or ()), *(args.revoke or ())])
    roots = tuple(_did(r, "root") for r in args.root or ())
    require = _token_args(args.require, "--require")
    provide = _token_args(args.provide, "--provide")
    revoke = _token_args(args.revoke, "--revoke")
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
    print(f"saved {save_context(ctx, directory=_cap_dir(args), clock=clock)}")
    return 0


def cmd_grant(args: argparse.Namespace) -> int:
    subject = _did(args.subject, "subject")
    audience = _audience(args.audience)
    caps = _required_caps(args.cap)
    topics = _capabilities(args.topic, "--topic")
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
    anchors = ctx.list_roots()[2].present()
    if not anchors:
        return CapCliError(
            f"context {ctx.name!r} has no provide anchor to delegate from (add one with "
            f"`dmsgw cap anchor --context {ctx.name} --provide …`, or issue your own token "
            "with --self-sign only)"
        )
    why = "; ".join(r.message for r in ctx.explain_delegate(audience, topics, expire, caps))
    return CapCliError(f"no provide anchor of context {ctx.name!r} allows this delegation: {why}")


def cmd_delegate(args: argparse.Namespace) -> int:
    subject = _did(args.subject, "subject")
    audience = _audience(args.audience)
    caps = _required_caps(args.cap)
    topics = _capabilities(args.topic, "--topic")
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
    tokens = _tokens(_read_input(args.tokens, "TOKENS"), "TOKENS")
    ctx = _signing_context(args)
    now = clock()
    revocations = []
    for t in tokens.present():
        check_revocable(t, now)
        revocations.append(ctx.revoke(t))
    ctx.add_roots(revoke=TokenList.of(revocations))
    path = save_context(ctx, directory=_cap_dir(args), clock=clock)
    for r in revocations:
        print(r.to_json().decode())
    _note(
        f"added to the revoke anchors of {path}; a verifier with another context needs them "
        "too: `dmsgw cap anchor --revoke` or `nunet cap anchor --revoke` (one token each)"
    )
    return 0


# --- check ---------------------------------------------------------------------------------


def _dms_model(args: argparse.Namespace) -> tuple[CapabilityContext, dict[str, str]]:
    """The DMS to check against, and (for the report) its DID and where the model is from."""
    if args.dms_did:
        did = _did(args.dms_did, "--dms-did")
        if did.method() != "key":
            raise CapCliError(f"--dms-did {did.uri!r}: a DMS's DID is a did:key")
        model = CapabilityContext(did, clock=clock)
        source = "anchors from the command line"
    else:
        name = args.dms_context or DEFAULT_DMS_CONTEXT
        directory = _cap_dir(args)
        path = _context_file(directory, name)
        if not path.is_file():
            raise CapCliError(
                f"no capability context {name!r} in {directory} to model the DMS with: copy the "
                f"DMS's {name}.cap there, or give --dms-did DID (with --root/--require/--revoke)"
            )
        model = load_context(name, directory=directory, clock=clock)
        source = f"context file {path}"
    roots = tuple(_did(r, "root") for r in args.root or ())
    model.add_roots(
        roots, _token_args(args.require, "--require"), None, _token_args(args.revoke, "--revoke")
    )
    return model, {"dms": model.did.uri, "model": source}


def _check_tokens(
    model: CapabilityContext,
    tokens: TokenList,
    presenter: tuple[DID, ID],
    behavior: str | None,
    required: tuple[Capability, ...],
    known: Collection[str] | None,
) -> Verdict:
    """The DMS's capability stages alone (``Consume`` + ``Require``) for tokens that
    ``presenter`` sends from its own key, addressed to the DMS's root actor."""
    if behavior is not None and known is not None and behavior not in known:
        return Verdict(
            Stage.BEHAVIOR,
            f"unknown behavior {behavior!r}",
            ("the DMS looks behaviors up by exact name and drops unknown ones",),
        )
    origin, subject = presenter
    try:
        report = model.consume(origin, tokens.to_json())
    except CapabilityBlobError as exc:
        return Verdict(
            Stage.CAPABILITY,
            f"consuming capabilities: {exc}",
            (str(exc.rejection),),
            (exc.rejection,),
        )
    audience = Handle.from_did(model.did.uri).id
    explanation = model.explain_require(model.did, subject, audience, required, report)
    if explanation.satisfied_by is not None:
        return Verdict(
            Stage.ACCEPTED, reasons=(f"authorized by {explanation.satisfied_by.describe()}",)
        )
    return Verdict(
        Stage.CAPABILITY,
        "requiring capabilities: not authorized",
        tuple(str(r) for r in explanation.rejections),
        explanation.rejections,
    )


def _presenter(args: argparse.Namespace, tokens: TokenList) -> tuple[DID, ID]:
    """``--from``, else the first token's subject: the DID that invokes with the tokens, and
    the actor ID its key signs envelopes as."""
    presenter = _did(args.from_, "--from") if args.from_ else tokens.present()[0].subject()
    try:
        return presenter, ID.from_public_key(presenter.public_key())
    except DmsgwError as exc:
        raise CapCliError(
            f"cannot check tokens presented by {presenter.uri or 'nobody'} ({exc}): give "
            "--from with the did:key of the sender"
        ) from None


def _verdict_json(verdict: Verdict, report: dict[str, str]) -> dict[str, Any]:
    return {
        **report,
        "accepted": verdict.accepted,
        "stage": str(verdict.stage),
        "dms_error": verdict.dms_error,
        "reasons": list(verdict.reasons),
        "rejections": [
            {
                "reason": str(r.reason),
                "message": r.message,
                "token": r.token.describe() if r.token is not None else None,
            }
            for r in verdict.rejections
        ],
    }


def _check_envelope(
    args: argparse.Namespace, data: bytes, required: tuple[Capability, ...]
) -> tuple[Verdict, dict[str, str]]:
    if args.behavior or args.from_:
        raise CapCliError(
            "--behavior and --from are for a token list; FILE is an envelope, whose `be` "
            "names the behavior and `from` the sender"
        )
    model, report = _dms_model(args)
    known = CATALOG if args.known_behaviors else None
    verdict = preflight(
        data, model, now_ns=clock(), known_behaviors=known, required=required or None
    )
    return verdict, {**report, "checked": "envelope"}


def _check_token_file(
    args: argparse.Namespace, data: bytes, required: tuple[Capability, ...]
) -> tuple[Verdict, dict[str, str]]:
    tokens = _tokens(data, "FILE")
    if not (args.behavior or required):
        raise CapCliError("FILE is a token list: say what it should allow with --behavior or --cap")
    presenter = _presenter(args, tokens)
    required = required or (args.behavior,)
    model, report = _dms_model(args)
    known = CATALOG if args.known_behaviors else None
    verdict = _check_tokens(model, tokens, presenter, args.behavior, required, known)
    note = (
        f"tokens presented by {presenter[0].uri} for [{', '.join(required)}]; with no "
        "envelope, its address, expiry and signature were not checked"
    )
    return verdict, {**report, "checked": "tokens", "note": note}


def cmd_check(args: argparse.Namespace) -> int:
    _one_stdin([args.file, *(args.require or ()), *(args.revoke or ())])
    data = _read_file(args.file, "FILE")
    required = _capabilities(args.cap, "--cap")
    if _json_keys(data, "FILE") & _ENVELOPE_KEYS:
        verdict, report = _check_envelope(args, data, required)
    else:
        verdict, report = _check_token_file(args, data, required)
    if args.json:
        print(json.dumps(_verdict_json(verdict, report), indent=2))
    else:
        what = "an envelope" if report["checked"] == "envelope" else "tokens"
        print(f"checked {what} against the DMS {report['dms']} ({report['model']})")
        if "note" in report:
            print(f"note: {report['note']}")
        print(verdict)
    return 0 if verdict.accepted else EXIT_REFUSED


# --- parsers -------------------------------------------------------------------------------

_TOKENS_HELP = 'token list JSON ({"tok":[…]}) or one token ({"dms":{…}}): inline, @FILE or -'


def _dir_options(parser: argparse.ArgumentParser, *, keys: bool) -> None:
    parser.add_argument(
        "--cap-dir",
        metavar="DIR",
        help=f"capability context directory (default: ${DMSGW_CAP_DIR_ENV}, else ~/.nunet/cap)",
    )
    if keys:
        parser.add_argument(
            "--key-dir",
            metavar="DIR",
            help="key directory (default: $DMSGW_KEY_DIR, else ~/.nunet/key)",
        )


def _context_option(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "-c",
        "--context",
        default=default,
        metavar="NAME",
        help=f"capability context, and the key of the same name (default: {DEFAULT_CONTEXT})",
    )


def _issue_options(parser: argparse.ArgumentParser, *, auto_expire: bool) -> None:
    parser.add_argument("subject", metavar="SUBJECT_DID", help="the DID receiving the rights")
    parser.add_argument(
        "--cap",
        action="append",
        metavar="CAP",
        help="capability to hand out, e.g. /dms/node (repeatable or comma-separated)",
    )
    parser.add_argument(
        "-t", "--topic", action="append", metavar="TOPIC", help="broadcast topic (repeatable)"
    )
    parser.add_argument(
        "-a", "--audience", metavar="DID", help="the only DID it may be used on (default: any)"
    )
    parser.add_argument(
        "-d",
        "--depth",
        type=int,
        default=0,
        help="how many tokens may be chained below it (default: 0, unlimited)",
    )
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("-e", "--expiry", metavar="TIME", help=f"expiry: {EXPIRY_FORMATS}")
    when.add_argument(
        "--duration", metavar="DURATION", help="lifetime, a Go duration such as 8760h or 30m"
    )
    if auto_expire:
        when.add_argument(
            "--auto-expire",
            action="store_true",
            help="expire with the provide anchor it is chained on (only with --self-sign no)",
        )


def _anchor_options(parser: argparse.ArgumentParser, *, provide: bool) -> None:
    parser.add_argument(
        "--root", action="append", metavar="DID", help="DID trusted outright (repeatable)"
    )
    parser.add_argument(
        "--require",
        action="append",
        metavar="TOKENS",
        help=f"require anchor, admitting side chains (repeatable): {_TOKENS_HELP}",
    )
    if provide:
        parser.add_argument(
            "--provide",
            action="append",
            metavar="TOKENS",
            help=f"provide anchor, to delegate and invoke from (repeatable): {_TOKENS_HELP}",
        )
    parser.add_argument(
        "--revoke",
        action="append",
        metavar="TOKENS",
        help=f"revocation tokens (repeatable): {_TOKENS_HELP}",
    )


def _add_new(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    new = sub.add_parser(
        "new",
        help="create a capability context (and its key, if missing)",
        description="Create the empty capability context NAME, for the key NAME (created, "
        "with a passphrase, if missing); prints its DID. An existing context is never "
        "overwritten.",
    )
    new.add_argument("name", metavar="NAME")
    _dir_options(new, keys=True)
    new.set_defaults(handler=cmd_new)


def _add_show(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    show = sub.add_parser(
        "show",
        aliases=["list"],
        help="show a context: DID, roots, require/provide/revoke anchors",
        description="Show a capability context, each token readably. Needs no key.",
    )
    show.add_argument("name", metavar="NAME", nargs="?", help=f"default: {DEFAULT_CONTEXT}")
    _context_option(show, None)
    show.add_argument("--json", action="store_true", help="print the context file as it is")
    _dir_options(show, keys=False)
    show.set_defaults(handler=cmd_show)


def _add_anchor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, remove in (("anchor", False), ("remove", True)):
        verb = "remove" if remove else "add (or with --remove, remove)"
        parser = sub.add_parser(
            name,
            help=f"{verb} root DIDs and require/provide/revoke anchors",
            description=f"{verb.capitalize()} anchors of a capability context; the previous "
            "file is kept as <name>.cap.<unix time>. A missing context is created when its key "
            "exists. A running DMS reloads its contexts on SIGUSR1 (or a restart).",
        )
        _context_option(parser, DEFAULT_CONTEXT)
        _anchor_options(parser, provide=True)
        if remove:
            parser.set_defaults(remove=True)
        else:
            parser.add_argument("--remove", action="store_true", help="remove instead of add")
        _dir_options(parser, keys=True)
        parser.set_defaults(handler=cmd_anchor)


def _add_grant(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    grant = sub.add_parser(
        "grant",
        help="issue a self-signed delegation, print its token list JSON",
        description="Delegate capabilities from this context's DID to SUBJECT_DID, e.g. "
        "`dmsgw cap grant --context dms --cap /dms/node --duration 8760h <gateway DID>`. "
        "Prints the token list JSON, as `nunet cap grant` does, for the subject's "
        "`cap anchor --provide`.",
    )
    _context_option(grant, DEFAULT_CONTEXT)
    _issue_options(grant, auto_expire=False)
    _dir_options(grant, keys=True)
    grant.set_defaults(handler=cmd_grant)


def _add_delegate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    delegate = sub.add_parser(
        "delegate",
        help="re-delegate rights held through provide anchors, print the token list JSON",
        description="Delegate capabilities chained on this context's provide anchors (an "
        "anchor must cover every --cap). --self-sign also adds a token signed by this context "
        "alone; --self-sign only issues just that one.",
    )
    _context_option(delegate, DEFAULT_CONTEXT)
    _issue_options(delegate, auto_expire=True)
    delegate.add_argument(
        "--self-sign", choices=("no", "also", "only"), default="no", help="default: no"
    )
    _dir_options(delegate, keys=True)
    delegate.set_defaults(handler=cmd_delegate)


def _add_revoke(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    revoke = sub.add_parser(
        "revoke",
        help="revoke tokens this context issued",
        description="Print one revocation token per line (as `nunet cap revoke`) and add them "
        "to this context's revoke anchors.",
    )
    revoke.add_argument("tokens", metavar="TOKENS", help=_TOKENS_HELP)
    _context_option(revoke, DEFAULT_CONTEXT)
    _dir_options(revoke, keys=True)
    revoke.set_defaults(handler=cmd_revoke)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check",
        help="would the DMS accept this envelope (or these tokens)? and if not, why",
        description="Run the DMS's receive path on FILE, an envelope JSON as the gateway "
        "POSTs it, or a token list JSON (then only the capability stages, for --behavior or "
        "--cap, as presented by --from). Exit status: 0 accepted, 1 refused, 2 bad input.",
    )
    check.add_argument("file", metavar="FILE", help="envelope or token list JSON file, or -")
    model = check.add_mutually_exclusive_group()
    model.add_argument(
        "--dms-context",
        metavar="NAME",
        help=f"the DMS's context file to model it with (default: {DEFAULT_DMS_CONTEXT})",
    )
    model.add_argument(
        "--dms-did", metavar="DID", help="model the DMS from its DID and these options' anchors"
    )
    _anchor_options(check, provide=False)
    check.add_argument(
        "--behavior", metavar="NAME", help="for a token list: the behavior to invoke"
    )
    check.add_argument(
        "--cap",
        action="append",
        metavar="CAP",
        help="the capabilities required (default: the behavior's name, as the DMS requires)",
    )
    check.add_argument(
        "--from",
        dest="from_",
        metavar="DID",
        help="for a token list: the sender's did:key (default: the first token's subject)",
    )
    check.add_argument(
        "--known-behaviors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="refuse behaviors missing from the catalog, as the DMS does (default: on)",
    )
    check.add_argument("--json", action="store_true", help="print the verdict as JSON")
    _dir_options(check, keys=False)
    check.set_defaults(handler=cmd_check)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cap`` (new, show/list, anchor, remove, grant, delegate, revoke, check)."""
    cap = subparsers.add_parser(
        "cap",
        help="manage capability contexts (as nunet cap) and check envelopes",
        description="Manage capability contexts in `nunet cap` files, and check what a DMS "
        "would make of an envelope. Keys are unlocked with $DMS_PASSPHRASE, else a prompt.",
    )
    sub = cap.add_subparsers(dest="cap_command", metavar="COMMAND", required=True)
    for add in (
        _add_new,
        _add_show,
        _add_anchor,
        _add_grant,
        _add_delegate,
        _add_revoke,
        _add_check,
    ):
        add(sub)
