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
it as an empty list). The rules themselves, with their reasons, are in ``keys/``; the commands
only read options and print: :mod:`.contexts` (new, show, anchor), :mod:`.issue` (grant,
delegate, revoke), :mod:`.check`, what they share in :mod:`.common`, and their options here.

Listing, anchoring and checking need no key: the file names its DID and anchors are not
signed. Issuing tokens unlocks the key of the same name (``$DMS_PASSPHRASE`` or a prompt).
Contexts live in ``--cap-dir``, ``$DMSGW_CAP_DIR`` or ``~/.nunet/cap``; keys in ``--key-dir``,
``$DMSGW_KEY_DIR`` or ``~/.nunet/key``.
"""

from __future__ import annotations

import argparse

from ...keys.ucan.expiry import EXPIRY_FORMATS
from .. import summary
from .check import cmd_check
from .common import DEFAULT_CONTEXT, DEFAULT_DMS_CONTEXT, DMSGW_CAP_DIR_ENV, CapCliError
from .contexts import cmd_anchor, cmd_new, cmd_show
from .issue import cmd_delegate, cmd_grant, cmd_revoke

__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_DMS_CONTEXT",
    "DMSGW_CAP_DIR_ENV",
    "CapCliError",
    "register",
]


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
        help=summary("cap"),
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
