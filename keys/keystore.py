"""DMS key files (``lib/crypto/keystore``), interchangeable with ``nunet key``.

A key file is ``<dir>/<name>.json``: the libp2p private-key protobuf, encrypted with
AES-256-CTR under ``scrypt(passphrase)[:32]`` and authenticated by
``SHA3-256(scrypt(passphrase)[32:64] || ciphertext)``, written by Go's ``json.MarshalIndent``
with two spaces and no trailing newline. :func:`marshal_to_json` reproduces Go's bytes exactly
for a given salt and IV, so files move freely between ``nunet`` and ``dmsgw``.

Where things live and where secrets come from:

* directory: ``--key-dir`` (the ``keys_dir`` argument), else ``$DMSGW_KEY_DIR``, else
  ``~/.nunet/key`` -- the directory ``nunet`` itself uses, so an operator's existing keys are
  found without configuration, while containers and services can point elsewhere;
* passphrase: ``$DMS_PASSPHRASE`` (the variable ``nunet`` reads), else a terminal prompt;
* scrypt cost: N=2^18, r=8, p=1 as the DMS writes, unless ``$DMSGW_TEST_SCRYPT_N`` sets a small
  N (the counterpart of Go's ``SetTestScryptParams``; for tests only, it weakens new files).

Unlocking costs about a second of scrypt by design, so unlocked keys are cached for the life of
the process, keyed by file path, inode, times, size and (a keyed hash of) the passphrase.
"""

from __future__ import annotations

import binascii
import dataclasses
import getpass
import hashlib
import hmac
import os
import re
import secrets
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import DmsgwError
from ..gojson import (
    INT64,
    STRING,
    GoDecodeError,
    GoStruct,
    StructOf,
    go_field,
    marshal,
    unmarshal,
)
from .crypto import KeyFormatError, PrivKey, unmarshal_private_key

__all__ = [
    "DEFAULT_KEY_DIR",
    "DEFAULT_SCRYPT_PARAMS",
    "DMSGW_KEY_DIR_ENV",
    "DMSGW_TEST_SCRYPT_N_ENV",
    "DMS_PASSPHRASE_ENV",
    "EmptyPassphraseError",
    "Key",
    "KeyExistsError",
    "KeyFileFormatError",
    "KeyNameError",
    "KeyNotFoundError",
    "KeyStore",
    "KeystoreError",
    "PassphraseError",
    "ScryptParams",
    "WrongPassphraseError",
    "marshal_to_json",
    "read_passphrase",
    "unmarshal_key",
    "validate_key_name",
]

DMS_PASSPHRASE_ENV = "DMS_PASSPHRASE"
DMSGW_KEY_DIR_ENV = "DMSGW_KEY_DIR"
DMSGW_TEST_SCRYPT_N_ENV = "DMSGW_TEST_SCRYPT_N"
DEFAULT_KEY_DIR = Path("~/.nunet/key")

KS_VERSION = 3
KS_CIPHER = "aes-256-ctr"
NAME_KDF = "scrypt"
SCRYPT_KEY_LEN = 64
SALT_LEN = 64
IV_LEN = 16
MAC_LEN = 32

# A key file chooses its own scrypt cost; cap it so a planted file cannot make us allocate
# gigabytes or spin for minutes (the DMS default needs 256 MiB).
_MAX_SCRYPT_MEMORY = 512 * 1024 * 1024
_MAX_SCRYPT_P = 16
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


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


class KeyNotFoundError(KeystoreError):
    """No key file of that name."""


class KeyExistsError(KeystoreError):
    """A key of that name exists and overwriting was not asked for."""


class KeyNameError(KeystoreError):
    """A key name that cannot safely be a file name."""


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


def _passphrase_bytes(passphrase: str) -> bytes:
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
    secret = _passphrase_bytes(passphrase)
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
    secret = _passphrase_bytes(passphrase)
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


# --- passphrases ---------------------------------------------------------------------------


def _can_prompt() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def read_passphrase(key_name: str, *, confirm: bool, env: Mapping[str, str] | None = None) -> str:
    """``GetDMSPassphrase``: ``$DMS_PASSPHRASE`` if set and non-empty, else ask on the terminal
    (twice when ``confirm``, i.e. when a new file is about to be encrypted)."""
    value = (os.environ if env is None else env).get(DMS_PASSPHRASE_ENV, "")
    if value:
        return value
    if not _can_prompt():
        raise PassphraseError(
            f"no passphrase for key {key_name!r}: set {DMS_PASSPHRASE_ENV} "
            "(there is no terminal to prompt on)"
        )
    first = getpass.getpass(f"Passphrase for key {key_name!r}: ")
    if not first:
        raise EmptyPassphraseError("passphrase is empty")
    if confirm and getpass.getpass("Repeat the passphrase: ") != first:
        raise PassphraseError("the two passphrases differ")
    return first


# --- the store (Go: keystore.go) -----------------------------------------------------------


def validate_key_name(name: str) -> str:
    """Names become file names: letters, digits, ``.``, ``_``, ``-``; no leading dot."""
    if not _NAME_RE.fullmatch(name):
        raise KeyNameError(
            f"invalid key name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


@dataclasses.dataclass(frozen=True, slots=True)
class _FileVersion:
    """A file's identity as far as ``stat`` can tell, and which passphrase opened it."""

    path: str
    inode: int
    mtime_ns: int
    ctime_ns: int
    size: int
    passphrase_tag: bytes


class _UnlockCache:
    """Process-wide: every :class:`KeyStore` shares it, so no file is unlocked twice."""

    def __init__(self) -> None:
        self._tag_key = secrets.token_bytes(32)
        self._entries: dict[_FileVersion, Key] = {}
        self._guard = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}

    def version(self, path: Path, passphrase: str) -> _FileVersion:
        st = path.stat()
        tag = hmac.digest(self._tag_key, _passphrase_bytes(passphrase), "sha256")
        return _FileVersion(str(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, tag)

    def path_lock(self, path: Path) -> threading.Lock:
        """Held while unlocking, so concurrent callers wait for one scrypt instead of racing."""
        with self._guard:
            return self._path_locks.setdefault(str(path), threading.Lock())

    def get(self, version: _FileVersion) -> Key | None:
        with self._guard:
            return self._entries.get(version)

    def put(self, version: _FileVersion, key: Key) -> None:
        with self._guard:
            self._forget_locked(version.path)
            self._entries[version] = key

    def forget(self, path: Path) -> None:
        with self._guard:
            self._forget_locked(str(path))

    def _forget_locked(self, path: str) -> None:
        for stale in [v for v in self._entries if v.path == path]:
            del self._entries[stale]


_UNLOCKED = _UnlockCache()


def _default_keys_dir() -> Path:
    return Path(os.environ.get(DMSGW_KEY_DIR_ENV) or DEFAULT_KEY_DIR).expanduser()


class KeyStore:
    """``BasicKeyStore``: ``<name>.json`` files in one directory.

    Files are written atomically (a ``0600`` temporary file in the same directory, then a
    rename or hard link), so a crash never leaves a truncated key; the directory is created
    ``0700``. ``scrypt_params`` applies to files this store writes; reading honours each
    file's own parameters.
    """

    def __init__(
        self,
        keys_dir: str | os.PathLike[str] | None = None,
        *,
        scrypt_params: ScryptParams | None = None,
    ) -> None:
        chosen = Path(keys_dir).expanduser() if keys_dir else _default_keys_dir()
        self.keys_dir = chosen.absolute()  # the unlock cache is keyed by path
        self.scrypt_params = ScryptParams.from_env() if scrypt_params is None else scrypt_params

    def _exists(self, key_id: str) -> KeyExistsError:
        return KeyExistsError(f"a key named {key_id!r} already exists in {self.keys_dir}")

    def _not_found(self, key_id: str) -> KeyNotFoundError:
        return KeyNotFoundError(f"no key named {key_id!r} in {self.keys_dir}")

    def path(self, key_id: str) -> Path:
        return self.keys_dir / f"{validate_key_name(key_id)}.json"

    def exists(self, key_id: str) -> bool:
        return self.path(key_id).is_file()

    def existing_path(self, key_id: str) -> Path:
        """The key's file, or :class:`KeyNotFoundError` (check before asking for a passphrase)."""
        path = self.path(key_id)
        if not path.is_file():
            raise self._not_found(key_id)
        return path

    def list_keys(self) -> list[str]:
        """Names of the key files, sorted; a missing directory holds no keys."""
        try:
            entries = list(self.keys_dir.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise KeystoreError(f"cannot read keystore directory {self.keys_dir}: {exc}") from None
        return sorted(
            p.stem
            for p in entries
            if p.suffix == ".json" and _NAME_RE.fullmatch(p.stem) and p.is_file()
        )

    def save(self, key_id: str, data: bytes, passphrase: str, *, overwrite: bool = False) -> Path:
        """Encrypt ``data`` under ``passphrase`` into ``<key_id>.json``; returns the path."""
        path = self.path(key_id)
        if not overwrite and path.exists():  # fail before a second of scrypt, not after
            raise self._exists(key_id)
        key = Key(id=key_id, data=bytes(data))
        text = marshal_to_json(key, passphrase, params=self.scrypt_params)
        try:
            self.keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._write_atomically(path, text, overwrite=overwrite)
        except FileExistsError:
            raise self._exists(key_id) from None
        except OSError as exc:
            raise KeystoreError(f"cannot write key file {path}: {exc}") from None
        _UNLOCKED.put(_UNLOCKED.version(path, passphrase), key)
        return path

    def _write_atomically(self, path: Path, text: bytes, *, overwrite: bool) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=self.keys_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # fails if the name is taken, unlike a rename
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        _fsync_dir(self.keys_dir)

    def get(self, key_id: str, passphrase: str) -> Key:
        """Unlock ``<key_id>.json`` (once per process and file version)."""
        path = self.path(key_id)
        with _UNLOCKED.path_lock(path):
            try:
                version = _UNLOCKED.version(path, passphrase)
                cached = _UNLOCKED.get(version)
                if cached is not None:
                    return cached
                blob = path.read_bytes()
            except FileNotFoundError:
                raise self._not_found(key_id) from None
            except OSError as exc:
                raise KeystoreError(f"cannot read key file {path}: {exc}") from None
            try:
                key = unmarshal_key(blob, passphrase)
            except KeystoreError as exc:
                raise type(exc)(f"key file {path}: {exc}") from None
            _UNLOCKED.put(version, key)
            return key

    def priv_key(self, key_id: str, passphrase: str) -> PrivKey:
        """The unlocked private key of ``<key_id>.json``."""
        return self.get(key_id, passphrase).priv_key()

    def delete(self, key_id: str, passphrase: str) -> None:
        """Remove a key file; like the DMS, only for whoever can unlock it."""
        path = self.path(key_id)
        self.get(key_id, passphrase)
        _UNLOCKED.forget(path)
        try:
            path.unlink()
        except FileNotFoundError:
            raise self._not_found(key_id) from None
        except OSError as exc:
            raise KeystoreError(f"cannot delete key file {path}: {exc}") from None


def _fsync_dir(directory: Path) -> None:
    """Make the new directory entry durable (crash-only); not possible on every platform."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
