"""``dmsgw cap check``: would the DMS accept this envelope (or these tokens)? If not, why.

A DMS drops an unauthorized message without a word, so ``check`` runs the DMS's receive path
(:func:`~dmsgw.transport.preflight.preflight`) on an envelope, or only its capability stages
(``Consume`` + ``Require``) on a bare token list, against a model of the DMS's context, and
says which rule refuses it. Exit status: 0 accepted, 1 refused, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection
from typing import Any

from ...behaviors.catalog import CATALOG
from ...errors import DmsgwError
from ...keys.did import DID
from ...keys.id import ID
from ...keys.ucan import CapabilityBlobError, CapabilityContext, TokenList, load_context
from ...keys.ucan.cap import Capability
from ...transport.envelope import Handle
from ...transport.preflight import Stage, Verdict, preflight
from .common import (
    DEFAULT_DMS_CONTEXT,
    CapCliError,
    cap_dir,
    capabilities,
    context_file,
    json_keys,
    one_stdin,
    parse_did,
    read_clock,
    read_file,
    read_tokens,
    token_args,
)

EXIT_REFUSED = 1
_ENVELOPE_KEYS = frozenset({"to", "be", "from", "nonce", "opt", "msg", "cap", "sig"})


def _dms_model(args: argparse.Namespace) -> tuple[CapabilityContext, dict[str, str]]:
    """The DMS to check against, and (for the report) its DID and where the model is from."""
    if args.dms_did:
        did = parse_did(args.dms_did, "--dms-did")
        if did.method() != "key":
            raise CapCliError(f"--dms-did {did.uri!r}: a DMS's DID is a did:key")
        model = CapabilityContext(did, clock=read_clock)
        source = "anchors from the command line"
    else:
        name = args.dms_context or DEFAULT_DMS_CONTEXT
        directory = cap_dir(args)
        path = context_file(directory, name)
        if not path.is_file():
            raise CapCliError(
                f"no capability context {name!r} in {directory} to model the DMS with: copy the "
                f"DMS's {name}.cap there, or give --dms-did DID (with --root/--require/--revoke)"
            )
        model = load_context(name, directory=directory, clock=read_clock)
        source = f"context file {path}"
    roots = tuple(parse_did(r, "root") for r in args.root or ())
    model.add_roots(
        roots, token_args(args.require, "--require"), None, token_args(args.revoke, "--revoke")
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
    presenter = parse_did(args.from_, "--from") if args.from_ else tokens.present()[0].subject()
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
        data, model, now_ns=read_clock(), known_behaviors=known, required=required or None
    )
    return verdict, {**report, "checked": "envelope"}


def _check_token_file(
    args: argparse.Namespace, data: bytes, required: tuple[Capability, ...]
) -> tuple[Verdict, dict[str, str]]:
    tokens = read_tokens(data, "FILE")
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
    one_stdin([args.file, *(args.require or ()), *(args.revoke or ())])
    data = read_file(args.file, "FILE")
    required = capabilities(args.cap, "--cap")
    if json_keys(data, "FILE") & _ENVELOPE_KEYS:
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
