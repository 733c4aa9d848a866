"""``dmsgw key …`` and ``dmsgw whoami``: the gateway's identity, in ``nunet key`` files.

``key new|did|import`` behave as ``nunet key`` does (same files, same DIDs), except that an
existing key is never overwritten: a gateway identity that other hosts have delegated
capabilities to must not be replaced by a typo. ``whoami`` is the first thing an operator runs:
it makes sure the gateway has a key and prints what the DMS side needs to trust it.

Passphrases come from ``$DMS_PASSPHRASE`` or a terminal prompt; key files live in ``--key-dir``,
``$DMSGW_KEY_DIR`` or ``~/.nunet/key`` (see :mod:`dmsgw.keys.keystore`).
"""

from __future__ import annotations

import argparse
import binascii
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from ..behaviors.node import GRANT_DURATION, nunet_grant_command
from ..errors import DmsgwError
from ..keys.crypto import (
    Ed25519PrivKey,
    KeyFormatError,
    PrivKey,
    generate_key_pair,
    marshal_private_key,
    marshal_public_key,
    unmarshal_private_key,
)
from ..keys.did import DID
from ..keys.id import ID
from ..keys.keystore import KeyExistsError, KeyStore, read_passphrase, validate_key_name
from ..keys.peer import peer_id_from_public_key
from . import summary

__all__ = ["DEFAULT_GATEWAY_KEY", "Identity", "parse_private_key", "register"]

DEFAULT_GATEWAY_KEY = "dmsgw"
FULL_CAPABILITIES = ("/dms/node",)
LEAST_CAPABILITIES = ("/dms/node/deployment", "/dms/node/resources", "/dms/node/peers")


class ImportKeyError(DmsgwError):
    """Input to ``key import`` that is not a private key."""


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """Everything public about a key, in the forms the DMS and libp2p print them."""

    name: str
    key_type: str
    did: str
    peer_id: str
    actor_id: str
    public_key_hex: str

    @classmethod
    def of(cls, name: str, key: PrivKey) -> Identity:
        pub = key.public_key()
        return cls(
            name=name,
            key_type=pub.type.name,
            did=DID.from_public_key(pub).uri,
            peer_id=peer_id_from_public_key(pub),
            actor_id=str(ID.from_public_key(pub)),
            public_key_hex=marshal_public_key(pub).hex(),
        )

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def lines(self) -> list[str]:
        return [
            f"key type    {self.key_type}",
            f"DID         {self.did}",
            f"peer ID     {self.peer_id}",
            f"actor ID    {self.actor_id}",
            f"public key  {self.public_key_hex}  (libp2p protobuf, hex)",
        ]


def parse_private_key(text: str) -> PrivKey:
    """``ImportAndStorePrivKey``'s rules: a libp2p private-key protobuf, else a raw Ed25519
    seed (32 bytes) or seed || public key (64 bytes), all hex."""
    try:
        raw = binascii.unhexlify(text.strip())
    except (binascii.Error, ValueError):
        raise ImportKeyError("the private key is not valid hex") from None
    if not raw:
        raise ImportKeyError("the private key is empty")
    try:
        return unmarshal_private_key(raw)
    except KeyFormatError as exc:
        protobuf_error = exc
    if len(raw) in (32, 64):
        key = Ed25519PrivKey(raw[:32])
        if len(raw) == 64 and key.public_key().raw() != raw[32:]:
            raise ImportKeyError("64-byte Ed25519 key: the public half does not match the seed")
        return key
    raise ImportKeyError(
        f"{len(raw)} bytes are neither a libp2p private-key protobuf ({protobuf_error}) "
        "nor a 32-byte Ed25519 seed"
    )


# --- handlers ------------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> KeyStore:
    return KeyStore(args.key_dir)


def _create(store: KeyStore, name: str, key: PrivKey) -> Path:
    """Store a new key, refusing to replace one (checked before the passphrase is asked)."""
    if store.exists(name):
        raise KeyExistsError(
            f"a key named {name!r} already exists in {store.keys_dir}; "
            "refusing to overwrite it (choose another name or remove the file)"
        )
    passphrase = read_passphrase(name, confirm=True)
    return store.save(name, marshal_private_key(key), passphrase)


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def cmd_new(args: argparse.Namespace) -> int:
    name = validate_key_name(args.name)
    key = generate_key_pair()
    _create(_store(args), name, key)
    print(DID.from_public_key(key.public_key()))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    name = validate_key_name(args.name)
    text = sys.stdin.read() if args.private_key_hex == "-" else args.private_key_hex
    key = parse_private_key(text)
    _create(_store(args), name, key)
    print(DID.from_public_key(key.public_key()))
    return 0


def cmd_did(args: argparse.Namespace) -> int:
    key = _store(args).unlock(validate_key_name(args.name))
    print(DID.from_public_key(key.public_key()))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    names = _store(args).list_keys()
    if args.json:
        _print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def cmd_export_public(args: argparse.Namespace) -> int:
    name = validate_key_name(args.name)
    identity = Identity.of(name, _store(args).unlock(name))
    if args.json:
        _print_json(identity.as_dict())
    else:
        print("\n".join([f"name        {name}", *identity.lines()]))
    return 0


def _whoami_text(identity: Identity, key_file: Path) -> str:
    full = nunet_grant_command(identity.did, FULL_CAPABILITIES)
    least = nunet_grant_command(identity.did, LEAST_CAPABILITIES)
    anchor = shlex.join(
        ["dmsgw", "cap", "anchor", "--context", identity.name, "--provide", "<token list JSON>"]
    )
    return "\n".join(
        [
            f"dms-gateway key {identity.name!r} ({key_file})",
            "",
            f"  DID       {identity.did}",
            f"  peer ID   {identity.peer_id}",
            f"  actor ID  {identity.actor_id}",
            "",
            "To let this gateway drive a DMS, run this on the DMS host (it delegates the",
            f"DMS's /dms/node capability to the gateway for {GRANT_DURATION}):",
            "",
            f"  {full}",
            "",
            "or, least privilege (deployments, resources and peers only):",
            "",
            f"  {least}",
            "",
            "Either prints a token list (JSON); add it to the gateway's capability context",
            "as a provide anchor, on this machine:",
            "",
            f"  {anchor}",
        ]
    )


def cmd_whoami(args: argparse.Namespace) -> int:
    store = _store(args)
    name = validate_key_name(args.key)
    if store.exists(name):
        key = store.unlock(name)
    else:
        key = generate_key_pair()
        _create(store, name, key)
        print(f"dmsgw: created key {name!r} in {store.keys_dir}", file=sys.stderr)
    identity = Identity.of(name, key)
    key_file = store.path(name)
    if args.json:
        _print_json(
            {
                **identity.as_dict(),
                "key_file": str(key_file),
                "grant_command": nunet_grant_command(identity.did, FULL_CAPABILITIES),
                "grant_command_least_privilege": nunet_grant_command(
                    identity.did, LEAST_CAPABILITIES
                ),
            }
        )
    else:
        print(_whoami_text(identity, key_file))
    return 0


# --- parsers -------------------------------------------------------------------------------


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--key-dir",
        metavar="DIR",
        help="key directory (default: $DMSGW_KEY_DIR, else ~/.nunet/key, as nunet uses)",
    )
    return common


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``key`` (new, list, did, import, export-public) and ``whoami``."""
    common = _common()
    key = subparsers.add_parser(
        "key",
        help=summary("key"),
        description="Manage keys in DMS key files, interchangeable with `nunet key`. "
        "The passphrase is read from $DMS_PASSPHRASE, else prompted for.",
    )
    sub = key.add_subparsers(dest="key_command", metavar="COMMAND", required=True)

    new = sub.add_parser("new", parents=[common], help="generate an Ed25519 key, print its DID")
    new.add_argument("name")
    new.set_defaults(handler=cmd_new)

    list_ = sub.add_parser("list", parents=[common], help="list key names")
    _json_flag(list_)
    list_.set_defaults(handler=cmd_list)

    did = sub.add_parser("did", parents=[common], help="print a key's DID")
    did.add_argument("name")
    did.set_defaults(handler=cmd_did)

    imp = sub.add_parser(
        "import",
        parents=[common],
        help="store an existing private key, print its DID",
        description="Store a private key given in hex: a libp2p private-key protobuf "
        "(08 01 12 40 …) or a raw 32-byte Ed25519 seed. Pass '-' to read it from stdin "
        "(keeps it out of the process list and shell history).",
    )
    imp.add_argument("name")
    imp.add_argument("private_key_hex", metavar="HEX|-")
    imp.set_defaults(handler=cmd_import)

    export = sub.add_parser(
        "export-public", parents=[common], help="print a key's DID, peer ID, actor ID, public key"
    )
    export.add_argument("name")
    _json_flag(export)
    export.set_defaults(handler=cmd_export_public)

    whoami = subparsers.add_parser(
        "whoami",
        parents=[common],
        help=summary("whoami"),
    )
    whoami.add_argument(
        "--key", default=DEFAULT_GATEWAY_KEY, metavar="NAME", help="key name (default: dmsgw)"
    )
    _json_flag(whoami)
    whoami.set_defaults(handler=cmd_whoami)
