"""Would this DMS accept this envelope? And if not, exactly why?

A DMS drops a message it does not accept and tells nobody: over REST the sender only sees a
408 when the message expires. The preflight runs the receiving DMS's own path — decode,
addressing, expiry and signature, behavior lookup, capability consume + require — against a
model of that DMS (its DID and capability context, e.g. its ``dms.cap`` file), and reports the
first stage that fails with the DMS's own error text and, for capabilities, every token's
reason. It never changes the model: consumed tokens are discarded afterwards.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Sequence

from ..keys.ucan.cap import Capability
from ..keys.ucan.context import CapabilityBlobError, CapabilityContext, ConsumeReport
from ..keys.ucan.token import NotAuthorizedError, Rejection
from . import envelope as env
from .envelope import Envelope, Handle


class Stage(enum.StrEnum):
    """Where in the DMS's receive path a message is refused."""

    DECODE = "decode"
    ADDRESS = "address"
    VERIFY = "verify"
    BEHAVIOR = "behavior"
    CAPABILITY = "capability"
    ACCEPTED = "accepted"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The preflight's answer: ``accepted``, or the ``stage`` that refuses, the DMS's error
    text, and the reasons in plain words."""

    stage: Stage
    dms_error: str = ""
    reasons: tuple[str, ...] = ()
    rejections: tuple[Rejection, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.stage is Stage.ACCEPTED

    def __str__(self) -> str:
        if self.accepted:
            return "accepted: the DMS would dispatch this message" + "".join(
                f"\n  - {r}" for r in self.reasons
            )
        head = f"refused at {self.stage}: {self.dms_error}"
        return head + "".join(f"\n  - {r}" for r in self.reasons)


def preflight(
    data: bytes | str | Envelope,
    receiver: CapabilityContext,
    *,
    now_ns: int,
    receiver_handle: Handle | None = None,
    known_behaviors: Collection[str] | None = None,
    required: Sequence[Capability] | None = None,
) -> Verdict:
    """Run the DMS receive path of ``receiver`` on ``data``.

    ``receiver_handle`` defaults to the root handle of the DMS whose DID ``receiver`` holds.
    ``known_behaviors`` (the catalog's names, say) makes an unknown behavior a refusal, as the
    DMS's exact lookup does. ``required`` defaults to the behavior name itself, the DMS's
    default capability for a behavior.
    """
    if isinstance(data, Envelope):
        msg = data
    else:
        try:
            msg = env.decode(data)
        except env.EnvelopeError as exc:
            return Verdict(
                Stage.DECODE, str(exc), ("the bytes are not an envelope a DMS can read",)
            )
    me = receiver_handle or Handle.from_did(receiver.did.uri)

    refused = _check_address(msg, me)
    if refused is not None:
        return refused
    try:
        env.verify(msg, now_ns)
    except env.MessageExpiredError as exc:
        late = (now_ns - msg.opt.exp) / 1e9
        return Verdict(Stage.VERIFY, str(exc), (f"opt.exp passed {late:.3f} s ago",))
    except env.EnvelopeError as exc:
        return Verdict(
            Stage.VERIFY,
            str(exc),
            ("the signature does not match from.id over the Go re-encoding",),
        )
    if known_behaviors is not None and msg.be not in known_behaviors:
        return Verdict(
            Stage.BEHAVIOR,
            f"unknown behavior {msg.be!r}",
            ("the DMS looks behaviors up by exact name and drops unknown ones",),
        )
    if msg.from_.id == me.id:
        return Verdict(Stage.ACCEPTED, reasons=("sent as the DMS itself: no capability needed",))
    caps = tuple(required) if required is not None else (msg.be,)
    return _check_capabilities(msg, receiver, me, caps)


def _check_address(msg: Envelope, me: Handle) -> Verdict | None:
    if msg.is_broadcast():
        return None
    if msg.to.id != me.id:
        return Verdict(
            Stage.ADDRESS,
            "message not addressed to this actor",
            (f"to.id is {msg.to.id}, this DMS is {me.id}",),
        )
    if msg.from_.addr.host and msg.from_.addr.host != me.addr.host:
        return Verdict(
            Stage.ADDRESS,
            "reply address is not this DMS",
            (
                f"from.addr.host is {msg.from_.addr.host}; over the REST API it must be the DMS's "
                f"peer ID {me.addr.host}, or the reply never reaches the waiting request",
            ),
        )
    return None


def _check_capabilities(
    msg: Envelope, receiver: CapabilityContext, me: Handle, required: tuple[Capability, ...]
) -> Verdict:
    blob = msg.cap or b""
    try:
        report = receiver.consume(msg.from_.did, blob)
    except CapabilityBlobError as exc:
        hint = (
            "the envelope carries no capability tokens: a cap is mandatory unless sending "
            "with the DMS's own key"
            if not blob
            else str(exc.rejection)
        )
        return Verdict(
            Stage.CAPABILITY, f"consuming capabilities: {exc}", (hint,), (exc.rejection,)
        )
    if msg.is_broadcast():
        return _check_broadcast(msg, receiver, blob, required, report)
    try:
        explanation = receiver.explain_require(receiver.did, msg.from_.id, me.id, required, report)
    finally:
        receiver.discard(blob)
    if explanation.ok:
        assert explanation.satisfied_by is not None
        return Verdict(
            Stage.ACCEPTED,
            reasons=(f"authorized by {explanation.satisfied_by.describe()}",),
        )
    no_caps = "no capabilities: " if not required else ""
    return Verdict(
        Stage.CAPABILITY,
        f"requiring capabilities: {no_caps}not authorized",
        tuple(str(r) for r in explanation.rejections),
        explanation.rejections,
    )


def _check_broadcast(
    msg: Envelope,
    receiver: CapabilityContext,
    blob: bytes,
    required: tuple[Capability, ...],
    report: ConsumeReport,
) -> Verdict:
    """``RequireBroadcast``: a broadcast token for the topic, anchored on the receiver, a root
    or a require anchor. The reasons are those of the tokens refused on the way in; a kept
    token that still does not fit is reported as such (per-rule explanations cover
    invocations only)."""
    try:
        receiver.require_broadcast(receiver.did, msg.from_.id, msg.opt.topic, required)
    except NotAuthorizedError as exc:
        reasons = tuple(str(r) for r in report.rejections()) or (
            f"no presented broadcast token allows {', '.join(required) or 'anything'} on topic "
            f"{msg.opt.topic!r} and leads back to {receiver.did.uri} or a root",
        )
        return Verdict(
            Stage.CAPABILITY, f"requiring capabilities: {exc}", reasons, report.rejections()
        )
    finally:
        receiver.discard(blob)
    return Verdict(Stage.ACCEPTED, reasons=(f"broadcast on {msg.opt.topic} authorized",))
