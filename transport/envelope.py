"""The actor ``Envelope`` and ``Handle`` (DMS ``actor/interface.go``, ``msg.go``, ``security.go``).

A DMS receiver decodes the JSON into Go structs, re-marshals them and checks the sender's
signature over ``"dms:msg:" + json.Marshal(envelope without sig)``. We therefore sign the Go
marshalling of our own structs, and verify a received envelope the same way the DMS does
(decode, re-encode canonically, check expiry, then the signature), so our verdict on any bytes
equals a DMS's.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
from typing import Any

from ..clock import Clock, system_clock
from ..errors import DmsgwError
from ..gojson import (
    BYTES,
    STRING,
    UINT64,
    GoDecodeError,
    GoStruct,
    StructOf,
    decode_plain,
    encode_any,
    go_field,
    marshal,
    marshal_without,
)
from ..keys.crypto import KeyFormatError, KeyType, PrivKey, PubKey
from ..keys.did import DID, DIDError
from ..keys.id import ID, ID_TYPE
from ..keys.peer import PeerIDError, peer_id_from_public_key, public_key_from_peer_id

SIGNATURE_PREFIX = b"dms:msg:"
DEFAULT_MESSAGE_TIMEOUT_NS = 30 * 1_000_000_000
ROOT_INBOX = "root"


class EnvelopeError(DmsgwError):
    """An envelope a DMS would drop; the message is the DMS's own error text."""


class MessageExpiredError(EnvelopeError):
    def __init__(self) -> None:
        super().__init__("message expired")


class SignatureVerificationError(EnvelopeError):
    def __init__(self) -> None:
        super().__init__("signature verification failed")


class BadSenderError(EnvelopeError):
    """Only the key behind ``from.id`` may sign an envelope."""

    def __init__(self) -> None:
        super().__init__("bad sender")


class HandleError(DmsgwError):
    """A peer ID, DID or handle JSON that does not name an actor."""


@dataclasses.dataclass(frozen=True, slots=True)
class Address(GoStruct):
    """Where an actor lives: the libp2p host (peer ID) and the inbox on it."""

    GO_CACHED = True

    host: str = go_field("host", STRING, omitempty=True, default="")
    inbox: str = go_field("inbox", STRING, omitempty=True, default="")

    def empty(self) -> bool:
        return not self.host and not self.inbox


@dataclasses.dataclass(frozen=True, slots=True)
class Handle(GoStruct):
    """An actor's identity (``id``), the DID it acts for, and its address."""

    GO_CACHED = True

    id: ID = go_field("id", ID_TYPE, default=ID())
    did: DID = go_field("did", StructOf(DID), default=DID())
    addr: Address = go_field("addr", StructOf(Address), default=Address())

    def empty(self) -> bool:
        return self.id.empty() and self.did.empty() and self.addr.empty()

    @classmethod
    def from_public_key(cls, key: PubKey, inbox: str = ROOT_INBOX) -> Handle:
        """The canonical root handle of the DMS node that owns ``key``."""
        return cls(
            ID.from_public_key(key),
            DID.from_public_key(key),
            Address(peer_id_from_public_key(key), inbox),
        )

    @classmethod
    def from_peer_id(cls, peer_id: str) -> Handle:
        """``actor.HandleFromPeerID``: the root handle behind an identity peer ID (the same
        object for an ID met lately: :data:`PEER_HANDLES`)."""
        return _handle_of_peer(peer_id)

    @classmethod
    def from_did(cls, did: str) -> Handle:
        """``actor.HandleFromDID``: the root handle of the node whose key the DID names."""
        try:
            key = DID(did).public_key()
        except DIDError as exc:
            raise HandleError(f"no actor handle for DID {did!r}: {exc}") from None
        if key.type not in (KeyType.Ed25519, KeyType.Secp256k1):
            raise HandleError(f"{did!r}: actors only use Ed25519 or secp256k1 keys")
        return cls.from_public_key(key)

    @classmethod
    def parse(cls, text: str) -> Handle:
        """A peer ID, a DID, or handle JSON, as the DMS CLI's ``--dest`` accepts."""
        text = text.strip()
        if text.startswith("{"):
            try:
                return cls.from_json(text)
            except GoDecodeError as exc:
                raise HandleError(f"handle JSON is not valid: {exc}") from None
        if text.startswith("did:"):
            return cls.from_did(text)
        return cls.from_peer_id(text)


PEER_HANDLES = 4096
"""Peer IDs whose handles are kept. The gateway asks every peer of the DMS network for its
free resources at each gathering, by peer ID: parsing one (base58, the key, the ID, the DID,
the peer ID again) was a good part of such a call's CPU, and an object met again hits the
envelope encoder's memo by identity (bench/README.md, "The ping through the client")."""


@functools.lru_cache(maxsize=PEER_HANDLES)
def _handle_of_peer(peer_id: str) -> Handle:
    """The root handle behind ``peer_id`` (a :class:`Handle` is immutable: one may be shared)."""
    try:
        return Handle.from_public_key(public_key_from_peer_id(peer_id))
    except (PeerIDError, KeyFormatError) as exc:
        raise HandleError(f"no actor handle for peer ID {peer_id!r}: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class EnvelopeOptions(GoStruct):
    """Expiry (Unix ns), reply-to behavior, and broadcast topic."""

    exp: int = go_field("exp", UINT64, default=0)
    cont: str = go_field("cont", STRING, omitempty=True, default="")
    topic: str = go_field("topic", STRING, omitempty=True, default="")


@dataclasses.dataclass(frozen=True, slots=True)
class Envelope(GoStruct):
    """One actor message. ``msg`` and ``cap`` are opaque bytes to the envelope signature."""

    to: Handle = go_field("to", StructOf(Handle), default=Handle())
    be: str = go_field("be", STRING, default="")
    from_: Handle = go_field("from", StructOf(Handle), default=Handle())
    nonce: int = go_field("nonce", UINT64, default=0)
    opt: EnvelopeOptions = go_field("opt", StructOf(EnvelopeOptions), default=EnvelopeOptions())
    msg: bytes | None = go_field("msg", BYTES, default=b"")
    cap: bytes | None = go_field("cap", BYTES, omitempty=True, default=None)
    sig: bytes | None = go_field("sig", BYTES, omitempty=True, default=None)

    def signature_data(self) -> bytes:
        """``"dms:msg:"`` + the Go JSON of this envelope without ``sig``."""
        return SIGNATURE_PREFIX + marshal_without(self, "sig")

    def expired(self, now_ns: int) -> bool:
        return now_ns > self.opt.exp

    def is_broadcast(self) -> bool:
        return self.to.empty() and bool(self.opt.topic)

    def payload(self) -> Any:
        """The JSON payload as plain Python values (``None`` for an empty ``msg``)."""
        return decode_plain(self.msg) if self.msg else None


def encode_payload(payload: Any) -> bytes:
    """``actor.Message``'s payload rule: nil is ``[]byte{}``, anything else Go JSON."""
    if payload is None:
        return b""
    if isinstance(payload, (bytes, bytearray)):
        return bytes(payload)  # already JSON: sent verbatim (msg is opaque to the signature)
    if isinstance(payload, GoStruct):
        return marshal(payload)
    return encode_any(payload)


def message(
    src: Handle,
    dest: Handle,
    behavior: str,
    payload: Any = None,
    *,
    expire: int | None = None,
    reply_to: str = "",
    topic: str = "",
    nonce: int = 0,
    cap: bytes | None = None,
    clock: Clock = system_clock,
) -> Envelope:
    """``actor.Message``: an unsigned envelope expiring in 30 s unless told otherwise,
    carrying the capability tokens ``cap``."""
    exp = expire if expire is not None else clock() + DEFAULT_MESSAGE_TIMEOUT_NS
    return Envelope(
        to=dest,
        be=behavior,
        from_=src,
        nonce=nonce,
        opt=EnvelopeOptions(exp, reply_to, topic),
        msg=encode_payload(payload),
        cap=cap,
    )


def reply_to(request: Envelope, payload: Any = None) -> Envelope:
    """``actor.ReplyTo``: swap the handles, address the request's ``cont``, keep its expiry."""
    if not request.opt.cont:
        raise EnvelopeError("no behavior to reply to: invalid message")
    return message(request.to, request.from_, request.opt.cont, payload, expire=request.opt.exp)


def sign(envelope: Envelope, key: PrivKey) -> Envelope:
    """``BasicSecurityContext.Sign``: the signer must be the actor named by ``from.id``."""
    if envelope.from_.id != ID.from_public_key(key.public_key()):
        raise BadSenderError()
    return signed(envelope, key)


def signed(envelope: Envelope, key: PrivKey) -> Envelope:
    """``envelope`` signed with ``key``. Its signed bytes are kept for :func:`wire`: the
    envelope's JSON is its signed JSON with ``sig`` added last (its last field), so that it
    need not be encoded twice (the larger part of a call's client CPU)."""
    data = envelope.signature_data()
    e = envelope  # made directly: dataclasses.replace takes twice as long
    result = Envelope(e.to, e.be, e.from_, e.nonce, e.opt, e.msg, e.cap, key.sign(data))
    if len(_SIGNED_BY_ID) >= _SIGNED_BY_ID_MAX:
        _SIGNED_BY_ID.clear()
    # The entry holds the envelope, so its id cannot be reused by another object meanwhile.
    _SIGNED_BY_ID[id(result)] = (result, data)
    return result


_SIGNED_BY_ID: dict[int, tuple[Envelope, bytes]] = {}
_SIGNED_BY_ID_MAX = 4096


def wire(envelope: Envelope) -> bytes:
    """``json.Marshal(envelope)``: for one :func:`signed` here, its signed bytes and the
    signature (once: the entry is let go)."""
    known = _SIGNED_BY_ID.pop(id(envelope), None)
    if known is None or known[0] is not envelope or not envelope.sig:
        return marshal(envelope)
    body = known[1][len(SIGNATURE_PREFIX) : -1]
    return b'%s,"sig":"%s"}' % (body, binascii.b2a_base64(envelope.sig, newline=False))


def verify(envelope: Envelope, now_ns: int) -> None:
    """``BasicSecurityContext.Verify``: expiry first, then the signature of ``from.id``."""
    if envelope.expired(now_ns):
        raise MessageExpiredError()
    try:
        pub = envelope.from_.id.public_key_obj()
    except KeyFormatError as exc:
        raise EnvelopeError(f"public key from id: {exc}") from None
    if not pub.verify(envelope.signature_data(), envelope.sig or b""):
        raise SignatureVerificationError()


def decode(data: bytes | str) -> Envelope:
    """``json.Unmarshal`` into an ``Envelope``, with the DMS's error wording."""
    try:
        return Envelope.from_json(data)
    except GoDecodeError as exc:
        raise EnvelopeError(f"unmarshal: {exc}") from None


def receive(data: bytes | str, now_ns: int) -> Envelope:
    """What a DMS does with bytes arriving for an actor before dispatching them."""
    envelope = decode(data)
    verify(envelope, now_ns)
    return envelope
