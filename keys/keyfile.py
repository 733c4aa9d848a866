"""DMS key files (``lib/crypto/keystore``'s ``key.go`` and ``types.go``): the encrypted format.

A key file is the libp2p private-key protobuf, encrypted with AES-256-CTR under
``scrypt(passphrase)[:32]`` and authenticated by ``SHA3-256(scrypt(passphrase)[32:64] ||
ciphertext)``, written by Go's ``json.MarshalIndent`` with two spaces and no trailing newline.
:func:`marshal_to_json` reproduces Go's bytes exactly for a given salt and IV, so files move
freely between ``nunet`` and ``dmsgw``.

The scrypt cost is N=2^18, r=8, p=1 as the DMS writes, unless ``$DMSGW_TEST_SCRYPT_N`` sets a
small N (the counterpart of Go's ``SetTestScryptParams``; for tests only, it weakens new files).
Where the files live, and where passphrases come from, is :mod:`.keystore`'s business.
"""

from __future__ import annotations

import binascii
import dataclasses
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import DmsgwError
from ..gojson import INT64, STRING, GoDecodeError, GoStruct, StructOf, go_field, marshal, unmarshal
from .crypto import KeyFormatError, PrivKey, unmarshal_private_key

__all__ = [
    "DEFAULT_SCRYPT_PARAMS",
    "DMSGW_TEST_SCRYPT_N_ENV",
    "EmptyPassphraseError",
    "Key",
    "KeyFileFormatError",
    "KeystoreError",
    "PassphraseError",
    "ScryptParams",
    "WrongPassphraseError",
    "marshal_to_json",
    "passphrase_bytes",
    "unmarshal_key",
]

DMSGW_TEST_SCRYPT_N_ENV = "DMSGW_TEST_SCRYPT_N"

KS_VERSION = 3
KS_CIPHER = "aes-256-ctr"
NAME_KDF = "scrypt"
SCRYPT_KEY_LEN = 64
SALT_LEN = 64
IV_LEN = 16
MAC_LEN = 32

# A key file chooses its own scrypt cost; cap it so a planted file cannot make us allocate
# gigabytes or spin for minutes (the DMS default, N=2^18 with r=8, needs half of the cap).
_MAX_SCRYPT_MEMORY = 512 * 1024 * 1024
_MAX_SCRYPT_P = 16


class KeystoreError(DmsgwError):
    """A key file or keystore operation failed."""


class PassphraseError(KeystoreError):
    """No usable passphrase could be obtained."""


class EmptyPassphraseError(PassphraseError):
    """Go's ``ErrEmptyPassphrase``: key files are never encrypted under an empty passphrase."""


class WrongPassphraseError(KeystoreError):
    """Go's ``ErrMACMismatch``: the passphrase does not open the file."""


class KeyFileFormatError(KeystoreError):
    """The file is not a key file we can read: corrupt, tampered with, or another format."""


# --- scrypt parameters ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ScryptParams:
    """The scrypt cost of a key file (``dklen`` is always 64, as the DMS writes)."""

    n: int
    r: int = 8
    p: int = 1

    def __post_init__(self) -> None:
        if self.n < 2 or self.n & (self.n - 1):
            raise KeystoreError(f"scrypt n must be a power of two >= 2, got {self.n}")
        if self.r < 1 or not 1 <= self.p <= _MAX_SCRYPT_P:
            raise KeystoreError(
                f"scrypt r={self.r}, p={self.p} are out of range (r >= 1, 1 <= p <= 16)"
            )
        if self.memory() > _MAX_SCRYPT_MEMORY:
            raise KeystoreError(
                f"scrypt n={self.n}, r={self.r} would need {self.memory() >> 20} MiB "
                f"(limit {_MAX_SCRYPT_MEMORY >> 20} MiB)"
            )

    def memory(self) -> int:
        """Bytes scrypt allocates (OpenSSL's own estimate, which ``maxmem`` is checked against)."""
        return 128 * self.r * (self.n + 2 + self.p)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ScryptParams:
        """The DMS defaults, or a small test N from ``$DMSGW_TEST_SCRYPT_N``."""
        value = (os.environ if env is None else env).get(DMSGW_TEST_SCRYPT_N_ENV, "")
        if not value:
            return DEFAULT_SCRYPT_PARAMS
        try:
            return cls(int(value))
        except (ValueError, KeystoreError):
            raise KeystoreError(
                f"{DMSGW_TEST_SCRYPT_N_ENV}={value!r} is not a power of two >= 2"
            ) from None


DEFAULT_SCRYPT_PARAMS = ScryptParams(1 << 18, 8, 1)


def _derive_key(passphrase: bytes, salt: bytes, params: ScryptParams) -> bytes:
    return hashlib.scrypt(
        passphrase,
        salt=salt,
        n=params.n,
        r=params.r,
        p=params.p,
        dklen=SCRYPT_KEY_LEN,
        maxmem=params.memory() + (1 << 20),
    )


def passphrase_bytes(passphrase: str) -> bytes:
    """Go uses the passphrase's bytes; ``surrogateescape`` gives back undecodable env bytes."""
    if not passphrase:
        raise EmptyPassphraseError("passphrase is empty")
    return passphrase.encode("utf-8", "surrogateescape")


def _aes_ctr(key: bytes, iv: bytes, data: bytes) -> bytes:
    ctx = Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()
    return ctx.update(data) + ctx.finalize()


def _mac(dk: bytes, ciphertext: bytes) -> bytes:
    return hashlib.sha3_256(dk[32:64] + ciphertext).digest()


# --- the JSON document (Go: types.go) ------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _CipherParamsJSON(GoStruct):
    GO_NAME = "keystore.cipherparamsJSON"
    iv: str = go_field("iv", STRING)


@dataclasses.dataclass(frozen=True, slots=True)
class _ScryptParamsJSON(GoStruct):
    GO_NAME = "keystore.ScryptParams"
    n: int = go_field("n", INT64)
    r: int = go_field("r", INT64)
    p: int = go_field("p", INT64)
    dklen: int = go_field("dklen", INT64)
    salt: str = go_field("salt", STRING)


@dataclasses.dataclass(frozen=True, slots=True)
class _CryptoJSON(GoStruct):
    GO_NAME = "keystore.cryptoJSON"
    cipher: str = go_field("cipher", STRING)
    ciphertext: str = go_field("ciphertext", STRING)
    cipherparams: _CipherParamsJSON = go_field("cipherparams", StructOf(_CipherParamsJSON))
    kdf: str = go_field("kdf", STRING)
    kdfparams: _ScryptParamsJSON = go_field("kdfparams", StructOf(_ScryptParamsJSON))
    mac: str = go_field("mac", STRING)


@dataclasses.dataclass(frozen=True, slots=True)
class _EncryptedKeyJSON(GoStruct):
    GO_NAME = "keystore.encryptedKeyJSON"
    id: str = go_field("id", STRING)
    crypto: _CryptoJSON = go_field("crypto", StructOf(_CryptoJSON))
    version: int = go_field("version", INT64)


def _indent(compact: str, indent: str = "  ") -> str:
    """Go's ``json.Indent`` with no prefix, over ``json.Marshal`` output (no insignificant
    whitespace); empty objects and arrays stay ``{}`` / ``[]`` as in Go."""
    out: list[str] = []
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(compact):
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
            out.append(ch)
        elif ch in "{[":
            depth += 1
            out.append(ch)
            if compact[i + 1 : i + 2] not in ("}", "]"):
                out.append("\n" + indent * depth)
        elif ch in "}]":
            depth -= 1
            if compact[i - 1] not in "{[":
                out.append("\n" + indent * depth)
            out.append(ch)
        elif ch == ",":
            out.append(",\n" + indent * depth)
        elif ch == ":":
            out.append(": ")
        else:
            out.append(ch)
    return "".join(out)


# --- Key (Go: key.go) ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """Go's ``keystore.Key``: a name and the secret bytes (a libp2p private key protobuf)."""

    id: str
    data: bytes = dataclasses.field(repr=False)

    def priv_key(self) -> PrivKey:
        """``Key.PrivKey``: the bytes as a private key; a bad payload means a bad file."""
        try:
            return unmarshal_private_key(self.data)
        except KeyFormatError as exc:
            raise KeyFileFormatError(
                f"key {self.id!r} decrypts to bytes that are not a usable private key: {exc}"
            ) from None


def marshal_to_json(
    key: Key,
    passphrase: str,
    *,
    params: ScryptParams = DEFAULT_SCRYPT_PARAMS,
    salt: bytes | None = None,
    iv: bytes | None = None,
) -> bytes:
    """``Key.MarshalToJSON``: the encrypted key file bytes.

    ``salt`` and ``iv`` are random unless given; fixing them is only for reproducing vectors.
    """
    secret = passphrase_bytes(passphrase)
    salt = secrets.token_bytes(SALT_LEN) if salt is None else salt
    iv = secrets.token_bytes(IV_LEN) if iv is None else iv
    if len(iv) != IV_LEN:
        raise KeystoreError(f"the AES-CTR IV must be {IV_LEN} bytes, got {len(iv)}")
    dk = _derive_key(secret, salt, params)
    ciphertext = _aes_ctr(dk[:32], iv, key.data)
    document = _EncryptedKeyJSON(
        id=key.id,
        crypto=_CryptoJSON(
            cipher=KS_CIPHER,
            ciphertext=ciphertext.hex(),
            cipherparams=_CipherParamsJSON(iv=iv.hex()),
            kdf=NAME_KDF,
            kdfparams=_ScryptParamsJSON(
                n=params.n, r=params.r, p=params.p, dklen=SCRYPT_KEY_LEN, salt=salt.hex()
            ),
            mac=_mac(dk, ciphertext).hex(),
        ),
        version=KS_VERSION,
    )
    return _indent(marshal(document).decode("utf-8")).encode("utf-8")


def _unhex(text: str, field: str) -> bytes:
    try:
        return binascii.unhexlify(text)
    except (binascii.Error, ValueError):
        raise KeyFileFormatError(f"field {field} is not valid hex") from None


def _check_document(doc: _EncryptedKeyJSON) -> None:
    """What Go checks (version, cipher), plus what would crash or mislead it (kdf, dklen)."""
    if doc.version != KS_VERSION:
        raise KeyFileFormatError(
            f"unsupported key file version {doc.version} (version mismatch: expected {KS_VERSION})"
        )
    if doc.crypto.cipher != KS_CIPHER:
        raise KeyFileFormatError(
            f"unsupported cipher {doc.crypto.cipher!r} (cipher mismatch: expected {KS_CIPHER!r})"
        )
    if doc.crypto.kdf != NAME_KDF:
        raise KeyFileFormatError(f"unsupported kdf {doc.crypto.kdf!r} (expected {NAME_KDF!r})")
    if doc.crypto.kdfparams.dklen != SCRYPT_KEY_LEN:
        raise KeyFileFormatError(
            f"unsupported scrypt dklen {doc.crypto.kdfparams.dklen} (expected {SCRYPT_KEY_LEN})"
        )


def unmarshal_key(data: bytes, passphrase: str) -> Key:
    """``UnmarshalKey``: decrypt a key file.

    Raises :class:`EmptyPassphraseError`, :class:`KeyFileFormatError` (not a readable key file)
    or :class:`WrongPassphraseError` (MAC mismatch). The plaintext is not parsed here, as in Go;
    :meth:`Key.priv_key` does that.
    """
    secret = passphrase_bytes(passphrase)
    try:
        doc = unmarshal(_EncryptedKeyJSON, data)
    except GoDecodeError as exc:
        raise KeyFileFormatError(f"not a DMS key file: {exc}") from None
    _check_document(doc)
    mac = _unhex(doc.crypto.mac, "crypto.mac")
    iv = _unhex(doc.crypto.cipherparams.iv, "crypto.cipherparams.iv")
    salt = _unhex(doc.crypto.kdfparams.salt, "crypto.kdfparams.salt")
    ciphertext = _unhex(doc.crypto.ciphertext, "crypto.ciphertext")
    if len(iv) != IV_LEN:
        raise KeyFileFormatError(f"crypto.cipherparams.iv must be {IV_LEN} bytes, got {len(iv)}")
    if len(mac) != MAC_LEN:
        raise KeyFileFormatError(f"crypto.mac must be {MAC_LEN} bytes, got {len(mac)}")
    kdf = doc.crypto.kdfparams
    try:
        params = ScryptParams(kdf.n, kdf.r, kdf.p)
    except KeystoreError as exc:
        raise KeyFileFormatError(f"crypto.kdfparams: {exc}") from None
    dk = _derive_key(secret, salt, params)
    if not hmac.compare_digest(_mac(dk, ciphertext), mac):
        raise WrongPassphraseError(
            "wrong passphrase (mac mismatch; if the passphrase is right, the file was altered)"
        )
    return Key(id=doc.id, data=_aes_ctr(dk[:32], iv, ciphertext))
