"""DMS key files: the Go vectors byte for byte, every failure class, and the file store."""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from dmsgw.keys import keyfile, keystore
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.keyfile import (
    EmptyPassphraseError,
    Key,
    KeyFileFormatError,
    KeystoreError,
    PassphraseError,
    ScryptParams,
    WrongPassphraseError,
    marshal_to_json,
    unmarshal_key,
)
from dmsgw.keys.keystore import (
    KeyExistsError,
    KeyNameError,
    KeyNotFoundError,
    KeyStore,
    read_passphrase,
)
from tests.support.vectors import VECTORS, load_vector

VECTOR = load_vector("keystore.json")
CASES = {case["name"]: case for case in VECTOR["cases"]}
PASSPHRASE = VECTOR["passphrase"]
PLAINTEXT = bytes.fromhex(VECTOR["plaintext_priv_protobuf_hex"])
SMALL = ScryptParams(16)

# The N=2^18 file costs a second of scrypt; derive each (passphrase, salt, params) only once.
_derive_once = functools.lru_cache(maxsize=None)(keyfile._derive_key)


@pytest.fixture(autouse=True)
def _memoised_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyfile, "_derive_key", _derive_once)


def _text(name: str) -> bytes:
    return str(CASES[name]["keyfile_text"]).encode()


def _salt_iv(text: bytes) -> tuple[bytes, bytes]:
    doc = json.loads(text)
    return (
        bytes.fromhex(doc["crypto"]["kdfparams"]["salt"]),
        bytes.fromhex(doc["crypto"]["cipherparams"]["iv"]),
    )


def _edit(text: bytes, edit: Any) -> bytes:
    doc = json.loads(text)
    edit(doc)
    return json.dumps(doc).encode()


# --- the Go vectors ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default_scrypt_n262144", "small_scrypt_n1024"])
def test_vector_decrypts_to_the_private_key(name: str) -> None:
    key = unmarshal_key(_text(name), PASSPHRASE)
    assert key.id == CASES[name]["decrypt_test"]["id"]
    assert key.data.hex() == CASES[name]["decrypt_test"]["data_hex"]
    assert key.data == PLAINTEXT
    assert key.priv_key().public_key().raw().hex() == VECTOR["key"]["pub_raw_hex"]


@pytest.mark.parametrize(
    ("name", "n"), [("default_scrypt_n262144", 1 << 18), ("small_scrypt_n1024", 1024)]
)
def test_writer_reproduces_the_go_file_byte_for_byte(name: str, n: int) -> None:
    salt, iv = _salt_iv(_text(name))
    text = marshal_to_json(
        Key("dms", PLAINTEXT), PASSPHRASE, params=ScryptParams(n), salt=salt, iv=iv
    )
    assert text == _text(name)
    assert not text.endswith(b"\n")  # Go writes MarshalIndent's bytes as they are


def test_standalone_vector_file_is_the_default_case() -> None:
    assert (VECTORS / "keystore_dms_test.json").read_bytes() == _text("default_scrypt_n262144")


def test_wrong_passphrase_is_a_mac_mismatch() -> None:
    assert CASES["small_scrypt_n1024"]["decrypt_wrong_pass"]["error"] == "mac mismatch"
    with pytest.raises(WrongPassphraseError, match=r"wrong passphrase \(mac mismatch"):
        unmarshal_key(_text("small_scrypt_n1024"), "not-the-passphrase")


def test_tampered_ciphertext_fails_the_mac() -> None:
    assert CASES["tampered_ciphertext"]["decrypt_test"]["error"] == "mac mismatch"
    with pytest.raises(WrongPassphraseError, match="altered"):
        unmarshal_key(_text("tampered_ciphertext"), PASSPHRASE)


def test_empty_passphrase_is_refused_both_ways() -> None:
    assert CASES["empty_passphrase"]["decrypt_test"]["error"] == "passphrase is empty"
    with pytest.raises(EmptyPassphraseError, match="passphrase is empty"):
        unmarshal_key(_text("empty_passphrase"), "")
    with pytest.raises(EmptyPassphraseError):
        marshal_to_json(Key("dms", PLAINTEXT), "", params=SMALL)


# --- damaged files -------------------------------------------------------------------------

_SMALL_TEXT = _text("small_scrypt_n1024")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(version=4), "version 4"),
        (lambda d: d.update(version="3"), "cannot unmarshal"),
        (lambda d: d["crypto"].update(cipher="aes-128-ctr"), "unsupported cipher"),
        (lambda d: d["crypto"].update(kdf="pbkdf2"), "unsupported kdf"),
        (lambda d: d["crypto"]["kdfparams"].update(dklen=32), "dklen"),
        (lambda d: d["crypto"]["kdfparams"].update(n=1000), "power of two"),
        (lambda d: d["crypto"]["kdfparams"].update(n=1 << 30), "MiB"),
        (lambda d: d["crypto"]["kdfparams"].update(n=1024.0), "cannot unmarshal"),
        (lambda d: d["crypto"]["kdfparams"].update(p=0), "out of range"),
        (lambda d: d["crypto"].update(mac="zz"), "crypto.mac is not valid hex"),
        (lambda d: d["crypto"].update(mac="abcd"), "crypto.mac must be 32 bytes"),
        (lambda d: d["crypto"].update(ciphertext="abc"), "crypto.ciphertext is not valid hex"),
        (lambda d: d["crypto"]["cipherparams"].update(iv="00" * 8), "must be 16 bytes"),
        (lambda d: d["crypto"]["kdfparams"].update(salt=" 00"), "salt is not valid hex"),
        (lambda d: d.update(crypto=[]), "cannot unmarshal"),
        (lambda d: d.clear(), "version 0"),
    ],
)
def test_damaged_file_is_a_format_error(edit: Any, message: str) -> None:
    with pytest.raises(KeyFileFormatError, match=message):
        unmarshal_key(_edit(_SMALL_TEXT, edit), PASSPHRASE)


@pytest.mark.parametrize("text", [b"", b"not json", b"[1]", b'{"id": "dms"', b"\xff\xfe"])
def test_non_json_is_a_format_error(text: bytes) -> None:
    with pytest.raises(KeyFileFormatError, match="not a DMS key file"):
        unmarshal_key(text, PASSPHRASE)


def test_payload_that_is_not_a_key_fails_when_used() -> None:
    text = marshal_to_json(Key("junk", b"\x08\x01\x12\x03abc"), PASSPHRASE, params=SMALL)
    key = unmarshal_key(text, PASSPHRASE)
    with pytest.raises(KeyFileFormatError, match="not a usable private key"):
        key.priv_key()


def test_field_names_match_case_insensitively_as_in_go() -> None:
    upper = _SMALL_TEXT.replace(b'"version"', b'"Version"').replace(b'"mac"', b'"MAC"')
    assert unmarshal_key(upper, PASSPHRASE).data == PLAINTEXT


def test_key_repr_hides_the_secret() -> None:
    assert PLAINTEXT.hex() not in repr(Key("dms", PLAINTEXT))


# --- scrypt parameters ---------------------------------------------------------------------


def test_scrypt_params_from_env() -> None:
    assert ScryptParams.from_env({}) == ScryptParams(1 << 18, 8, 1)
    assert ScryptParams.from_env({"DMSGW_TEST_SCRYPT_N": "16"}) == ScryptParams(16)
    for bad in ("15", "x", "1"):
        with pytest.raises(KeystoreError, match="DMSGW_TEST_SCRYPT_N"):
            ScryptParams.from_env({"DMSGW_TEST_SCRYPT_N": bad})


# --- passphrases ---------------------------------------------------------------------------


def test_passphrase_from_env() -> None:
    assert read_passphrase("k", confirm=True, env={"DMS_PASSPHRASE": "s3cret"}) == "s3cret"


def test_no_env_and_no_terminal_says_to_set_dms_passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keystore, "_can_prompt", lambda: False)
    with pytest.raises(PassphraseError, match="set DMS_PASSPHRASE"):
        read_passphrase("k", confirm=False, env={"DMS_PASSPHRASE": ""})


@pytest.mark.parametrize(
    ("answers", "confirm", "outcome"),
    [
        (["pw"], False, "pw"),
        (["pw", "pw"], True, "pw"),
        (["pw", "other"], True, PassphraseError),
        ([""], True, EmptyPassphraseError),
    ],
)
def test_prompt(
    monkeypatch: pytest.MonkeyPatch, answers: list[str], confirm: bool, outcome: Any
) -> None:
    replies = iter(answers)
    monkeypatch.setattr(keystore, "_can_prompt", lambda: True)
    monkeypatch.setattr(keystore.getpass, "getpass", lambda prompt: next(replies))
    if isinstance(outcome, str):
        assert read_passphrase("k", confirm=confirm, env={}) == outcome
    else:
        with pytest.raises(outcome):
            read_passphrase("k", confirm=confirm, env={})


# --- the store -----------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> KeyStore:
    return KeyStore(tmp_path / "keys", scrypt_params=SMALL)


def _new_key_bytes() -> bytes:
    return marshal_private_key(Ed25519PrivKey.generate())


def test_round_trip_through_a_fresh_process_cache(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _new_key_bytes()
    path = store.save("gw", data, "pw")
    monkeypatch.setattr(keystore, "_UNLOCKED", keystore._UnlockCache())
    assert store.get("gw", "pw") == Key("gw", data)
    assert store.priv_key("gw", "pw").raw() == data[4:]
    doc = json.loads(path.read_bytes())
    assert doc["crypto"]["kdfparams"]["n"] == 16
    assert len(bytes.fromhex(doc["crypto"]["kdfparams"]["salt"])) == 64


def test_files_and_directory_are_private(store: KeyStore) -> None:
    path = store.save("gw", _new_key_bytes(), "pw")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.keys_dir.stat().st_mode) == 0o700


def test_atomic_write_leaves_no_temporary_file(store: KeyStore) -> None:
    store.save("gw", _new_key_bytes(), "pw")
    store.save("gw", _new_key_bytes(), "pw", overwrite=True)
    assert sorted(p.name for p in store.keys_dir.iterdir()) == ["gw.json"]


def test_failed_write_leaves_no_temporary_file(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_link(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(keystore.os, "link", broken_link)
    with pytest.raises(KeystoreError, match="disk on fire"):
        store.save("gw", _new_key_bytes(), "pw")
    assert list(store.keys_dir.iterdir()) == []


def test_save_refuses_to_overwrite_unless_asked(store: KeyStore) -> None:
    first = _new_key_bytes()
    store.save("gw", first, "pw")
    with pytest.raises(KeyExistsError, match="already exists"):
        store.save("gw", _new_key_bytes(), "pw")
    assert store.get("gw", "pw").data == first


def test_lost_race_to_create_is_key_exists(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save("gw", _new_key_bytes(), "pw")
    monkeypatch.setattr(Path, "exists", lambda self: False)  # as if created after our check
    with pytest.raises(KeyExistsError):
        store.save("gw", _new_key_bytes(), "pw")
    assert sorted(p.name for p in store.keys_dir.iterdir()) == ["gw.json"]


def test_list_exists_delete(store: KeyStore) -> None:
    assert store.list_keys() == []
    for name in ("b", "a.1", "user"):
        store.save(name, _new_key_bytes(), "pw")
    (store.keys_dir / "notes.txt").write_text("not a key")
    (store.keys_dir / ".hidden.json").write_text("{}")
    assert store.list_keys() == ["a.1", "b", "user"]
    assert store.exists("b") and not store.exists("c")
    with pytest.raises(WrongPassphraseError):
        store.delete("b", "wrong")
    store.delete("b", "pw")
    assert store.list_keys() == ["a.1", "user"]
    with pytest.raises(KeyNotFoundError):
        store.delete("b", "pw")


def test_missing_key(store: KeyStore) -> None:
    with pytest.raises(KeyNotFoundError, match="no key named 'nope'"):
        store.get("nope", "pw")
    with pytest.raises(KeyNotFoundError):
        store.existing_path("nope")


def test_wrong_passphrase_names_the_file(store: KeyStore) -> None:
    path = store.save("gw", _new_key_bytes(), "pw")
    with pytest.raises(WrongPassphraseError, match=re.escape(f"{path}: wrong passphrase")):
        store.get("gw", "wrong")


@pytest.mark.parametrize("name", ["", ".hidden", "../up", "a/b", "a\\b", "x" * 101, "sp ace", "é"])
def test_unsafe_names_are_refused(store: KeyStore, name: str) -> None:
    with pytest.raises(KeyNameError, match="invalid key name"):
        store.path(name)


def test_directory_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DMSGW_KEY_DIR", str(tmp_path / "env-keys"))
    assert KeyStore().keys_dir == tmp_path / "env-keys"
    assert KeyStore(tmp_path / "flag").keys_dir == tmp_path / "flag"
    monkeypatch.delenv("DMSGW_KEY_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert KeyStore().keys_dir == tmp_path / ".nunet" / "key"


def test_store_scrypt_params_default_from_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "32")
    assert KeyStore(tmp_path).scrypt_params == ScryptParams(32)


def test_each_file_version_is_unlocked_once(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save("gw", _new_key_bytes(), "pw")
    monkeypatch.setattr(keystore, "_UNLOCKED", keystore._UnlockCache())
    calls: list[ScryptParams] = []

    def counting(passphrase: bytes, salt: bytes, params: ScryptParams) -> bytes:
        calls.append(params)
        return _derive_once(passphrase, salt, params)

    monkeypatch.setattr(keyfile, "_derive_key", counting)
    first = store.get("gw", "pw")
    assert KeyStore(store.keys_dir).get("gw", "pw") is first  # shared across stores
    assert len(calls) == 1
    with pytest.raises(WrongPassphraseError):  # a cached key never bypasses the passphrase
        store.get("gw", "other")
    assert len(calls) == 2
    path = store.path("gw")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    store.get("gw", "pw")
    assert len(calls) == 3


def test_a_saved_key_needs_no_unlock(store: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _new_key_bytes()
    store.save("gw", data, "pw")

    def no_scrypt(*args: object) -> bytes:
        raise AssertionError("unlocked a key this process just wrote")

    monkeypatch.setattr(keyfile, "_derive_key", no_scrypt)
    assert store.get("gw", "pw").data == data


def test_a_go_written_file_opens_from_the_store(store: KeyStore) -> None:
    store.keys_dir.mkdir(parents=True)
    (store.keys_dir / "dms.json").write_bytes(_SMALL_TEXT)
    assert store.list_keys() == ["dms"]
    assert store.get("dms", PASSPHRASE).data == PLAINTEXT


def test_unlock_reports_a_missing_key_before_asking_for_its_passphrase(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one way a stored key is unlocked (the CLI's commands, ``dmsgw.connect``, the
    embedded devnet's key): asked without a passphrase, it reads ``$DMS_PASSPHRASE`` or
    prompts, but only for a key that exists."""
    monkeypatch.delenv("DMS_PASSPHRASE", raising=False)
    monkeypatch.setattr(keystore, "_can_prompt", lambda: True)
    monkeypatch.setattr(keystore.getpass, "getpass", lambda prompt: "pw")
    key = _new_key_bytes()
    store.save("gw", key, "pw")
    assert marshal_private_key(store.unlock("gw")) == key
    assert marshal_private_key(store.unlock("gw", "pw")) == key
    monkeypatch.setattr(keystore.getpass, "getpass", lambda prompt: pytest.fail("asked"))
    with pytest.raises(KeyNotFoundError, match="no key named 'nope'"):
        store.unlock("nope")


def test_a_held_key_unlocks_without_a_passphrase_until_its_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "16")
    monkeypatch.delenv("DMS_PASSPHRASE", raising=False)
    monkeypatch.setattr(keystore, "_can_prompt", lambda: False)
    store = KeyStore(tmp_path)
    seed = Ed25519PrivKey(bytes(range(32)))
    store.save("held", marshal_private_key(seed), "pw")
    store.save("other", marshal_private_key(seed), "pw")
    assert store.hold("held", "pw").public_key() == seed.public_key()
    assert store.unlock("held").public_key() == seed.public_key()  # no passphrase asked
    with pytest.raises(KeystoreError, match="no passphrase for key 'other'"):
        store.unlock("other")  # only the held key
    store.save("held", marshal_private_key(Ed25519PrivKey(bytes(32))), "pw", overwrite=True)
    with pytest.raises(KeystoreError, match="no passphrase for key 'held'"):
        store.unlock("held")  # the file changed: the held key no longer stands for it
