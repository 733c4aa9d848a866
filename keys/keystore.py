"""The DMS's key store (``lib/crypto/keystore/keystore.go``), interchangeable with ``nunet key``.

A key is the file ``<dir>/<name>.json``, in the encrypted format of :mod:`.keyfile`.

Where things live and where secrets come from:

* directory: ``--key-dir`` (the ``keys_dir`` argument), else ``$DMSGW_KEY_DIR``, else
  ``~/.nunet/key`` -- the directory ``nunet`` itself uses, so an operator's existing keys are
  found without configuration, while containers and services can point elsewhere;
* passphrase: ``$DMS_PASSPHRASE`` (the variable ``nunet`` reads), else a terminal prompt.

Unlocking costs about a second of scrypt by design, so unlocked keys are cached for the life of
the process, keyed by file path, inode, times, size and (a keyed hash of) the passphrase.
"""

from __future__ import annotations

import dataclasses
import getpass
import hmac
import os
import re
import secrets
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from .crypto import PrivKey
from .keyfile import (
    EmptyPassphraseError,
    Key,
    KeystoreError,
    PassphraseError,
    ScryptParams,
    marshal_to_json,
    passphrase_bytes,
    unmarshal_key,
)

__all__ = [
    "DEFAULT_KEY_DIR",
    "DMSGW_KEY_DIR_ENV",
    "DMS_PASSPHRASE_ENV",
    "KeyExistsError",
    "KeyNameError",
    "KeyNotFoundError",
    "KeyStore",
    "read_passphrase",
    "validate_key_name",
]

DMS_PASSPHRASE_ENV = "DMS_PASSPHRASE"
DMSGW_KEY_DIR_ENV = "DMSGW_KEY_DIR"
DEFAULT_KEY_DIR = Path("~/.nunet/key")

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class KeyNotFoundError(KeystoreError):
    """No key file of that name."""


class KeyExistsError(KeystoreError):
    """A key of that name exists and overwriting was not asked for."""


class KeyNameError(KeystoreError):
    """A key name that cannot safely be a file name."""


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
        self._held: dict[str, tuple[tuple[int, int, int, int], Key]] = {}

    def version(self, path: Path, passphrase: str) -> _FileVersion:
        st = path.stat()
        tag = hmac.digest(self._tag_key, passphrase_bytes(passphrase), "sha256")
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
            self._held.pop(str(path), None)

    def hold(self, path: Path, key: Key) -> None:
        """Keep ``key`` for unlocks that bring no passphrase, while ``path`` is unchanged."""
        with self._guard:
            self._held[str(path)] = (_stat_identity(path), key)

    def held(self, path: Path) -> Key | None:
        """The key :meth:`hold` kept for ``path``, unless the file changed since."""
        with self._guard:
            found = self._held.get(str(path))
        if found is None:
            return None
        try:
            return found[1] if _stat_identity(path) == found[0] else None
        except OSError:
            return None

    def _forget_locked(self, path: str) -> None:
        for stale in [v for v in self._entries if v.path == path]:
            del self._entries[stale]


def _stat_identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


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

    def unlock(self, key_id: str, passphrase: str | None = None) -> PrivKey:
        """The private key ``key_id``, unlocked with ``passphrase``, else ``$DMS_PASSPHRASE`` or
        a prompt: the one way a stored key is unlocked. A missing key is reported before a
        passphrase is asked for."""
        path = self.existing_path(key_id)
        held = _UNLOCKED.held(path) if passphrase is None else None
        if held is not None:
            return held.priv_key()
        secret = passphrase if passphrase is not None else read_passphrase(key_id, confirm=False)
        return self.priv_key(key_id, secret)

    def hold(self, key_id: str, passphrase: str | None = None) -> PrivKey:
        """Unlock ``key_id`` and keep it for this process (and the processes it forks): later
        :meth:`unlock` calls that bring no passphrase need none while the file is unchanged.
        Only the key agent (``dmsgw agent``) holds keys."""
        path = self.existing_path(key_id)
        secret = passphrase if passphrase is not None else read_passphrase(key_id, confirm=False)
        key = self.get(key_id, secret)
        _UNLOCKED.hold(path, key)
        return key.priv_key()

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
