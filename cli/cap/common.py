"""What every ``dmsgw cap`` command shares: its clock, errors, and reading its arguments.

Values are read here and checked by the rules of ``keys/``: a DID by :func:`from_string`, a
capability by :func:`check_capability`. Token JSON may be inline, ``@FILE`` or ``-`` (stdin),
and a single token pasted where a list is expected is read as one token (Go would read it as an
empty list).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ...clock import NS_PER_SECOND, Clock, system_clock
from ...errors import DmsgwError
from ...gojson import GoDecodeError
from ...gojson.scanner import go_syntax_error
from ...keys.did import DID, DIDError, from_string
from ...keys.keystore import KeyStore, validate_key_name
from ...keys.trust import Provider, provider_from_private_key
from ...keys.ucan import Token, TokenList, default_cap_dir, unmarshal_token_list
from ...keys.ucan.cap import Capability, CapabilityError, check_capability
from ...keys.ucan.store import CAP_DIR_ENV
from ...keys.ucan.token import format_second
from ..key import DEFAULT_GATEWAY_KEY

DEFAULT_CONTEXT = DEFAULT_GATEWAY_KEY
"""The gateway's context is named after its key, as every ``nunet`` context is."""
DEFAULT_DMS_CONTEXT = "dms"
DMSGW_CAP_DIR_ENV = CAP_DIR_ENV

clock: Clock = system_clock
"""The time every command reads (token expiries, ``check``'s "now"); tests pin it here."""


def read_clock() -> int:
    """The time from :data:`clock`, looked up at each call so that pinning it reaches every
    command and the contexts they load (which are given ``read_clock`` as their clock)."""
    return clock()


class CapCliError(DmsgwError):
    """Input to a ``dmsgw cap`` command that names nothing usable."""


_TOKEN_KEYS = frozenset({"dms", "ucan"})
_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


# --- reading arguments ---------------------------------------------------------------------


def note(text: str) -> None:
    """Progress for humans on stderr, so stdout stays pasteable JSON or a DID."""
    print(f"dmsgw: {text}", file=sys.stderr)


def parse_did(text: str, what: str) -> DID:
    """``text`` as a DID, or an error naming the option (``what``) it was given for."""
    try:
        return from_string(text)
    except DIDError as exc:
        raise CapCliError(f"invalid {what} DID {exc}") from None


def capabilities(values: Sequence[str] | None, flag: str) -> tuple[Capability, ...]:
    """Repeatable and comma-separated, like cobra's string slices."""
    caps = tuple(c.strip() for value in values or () for c in value.split(","))
    for c in caps:
        try:
            check_capability(c)
        except CapabilityError as exc:
            raise CapCliError(f"{flag} {c!r}: {exc}") from None
    return caps


def read_input(value: str, what: str) -> bytes:
    """``-`` is stdin, ``@path`` a file, anything else the JSON itself."""
    if value == "-":
        return sys.stdin.read().encode()
    if value.startswith("@"):
        return read_file(value[1:], what)
    return value.encode()


def read_file(path: str, what: str) -> bytes:
    """The bytes of ``path`` (``-``: stdin); an unreadable file is an input error, not a
    traceback."""
    if path == "-":
        return sys.stdin.read().encode()
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise CapCliError(f"{what}: cannot read {path}: {exc.strerror}") from None


def one_stdin(values: Sequence[str]) -> None:
    """Standard input can be read once: two options both asking for it is a mistake."""
    if sum(v in ("-", "@-") for v in values) > 1:
        raise CapCliError("only one option can read standard input ('-')")


def json_keys(data: bytes, what: str) -> frozenset[str]:
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


def read_tokens(data: bytes, what: str) -> TokenList:
    """A token list, or one token (what ``nunet cap revoke`` prints): the non-empty list."""
    keys = json_keys(data, what)
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


def token_args(values: Sequence[str] | None, flag: str) -> TokenList | None:
    """Every value of a repeatable token option, as one list (``None`` when not given)."""
    if not values:
        return None
    lists = [read_tokens(read_input(v, flag), flag) for v in values]
    return TokenList.of(t for tokens in lists for t in tokens.present())


# --- contexts, keys and time ---------------------------------------------------------------


def cap_dir(args: argparse.Namespace) -> Path:
    """``--cap-dir``, else the directory every tool shares (:func:`default_cap_dir`)."""
    return Path(args.cap_dir).expanduser() if args.cap_dir else default_cap_dir()


def context_file(directory: Path, name: str) -> Path:
    """``<name>.cap``; the name becomes a file name, so it is checked like a key name."""
    return directory / f"{validate_key_name(name)}.cap"


def existing_context_file(directory: Path, name: str) -> Path:
    """The context's file, or an error saying how to create it."""
    path = context_file(directory, name)
    if not path.is_file():
        raise CapCliError(
            f"no capability context {name!r} in {directory} (create it with `dmsgw cap new {name}`)"
        )
    return path


def unlock(store: KeyStore, name: str) -> Provider:
    """The key ``name`` as a signer, unlocked with ``$DMS_PASSPHRASE`` or a prompt."""
    return provider_from_private_key(store.unlock(name))


def _span(ns: int) -> str:
    """A duration for humans, to the two largest units: ``364d 23h``, ``5m 3s``."""
    seconds = ns // NS_PER_SECOND
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2]) or "0s"


def when(expire: int, now: int) -> str:
    """An expiry for people: the instant, and how far away it is from ``now``."""
    moment = format_second(expire)
    if expire >= now:
        return f"{moment} (in {_span(expire - now)})"
    return f"{moment} (expired {_span(now - expire)} ago)"
