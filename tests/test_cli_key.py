"""``dmsgw key …`` and ``dmsgw whoami`` through the real entry point (``dmsgw.cli.main``).

Scrypt runs with N=16 through ``$DMSGW_TEST_SCRYPT_N`` so each command takes milliseconds.
"""

from __future__ import annotations

import io
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from dmsgw import cli
from dmsgw.keys import keystore
from tests.support.vectors import load_vector

VECTOR = load_vector("keystore.json")
KEY = VECTOR["key"]  # Ed25519 seed 00..1f
GO_FILE = next(c for c in VECTOR["cases"] if c["name"] == "small_scrypt_n1024")["keyfile_text"]


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # never touch the real ~/.nunet
    monkeypatch.delenv("DMSGW_KEY_DIR", raising=False)
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "16")
    monkeypatch.setenv("DMS_PASSPHRASE", "pw")
    monkeypatch.setattr(keystore, "_can_prompt", lambda: False)


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "keys"


class Run:
    def __init__(self, capsys: pytest.CaptureFixture[str], key_dir: Path) -> None:
        self.capsys = capsys
        self.key_dir = key_dir

    def __call__(self, *argv: str, key_dir: bool = True) -> tuple[int, str, str]:
        args = [*argv, "--key-dir", str(self.key_dir)] if key_dir else list(argv)
        code = cli.main(args)
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        return out

    def fails(self, *argv: str, match: str) -> str:
        code, out, err = self(*argv)
        assert code == 2
        assert out == ""
        assert err.startswith("dmsgw: error: ") and err.count("\n") == 1, err
        assert "Traceback" not in err
        assert match in err, err
        return err


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], key_dir: Path) -> Run:
    return Run(capsys, key_dir)


# --- key new / did / list ------------------------------------------------------------------


def test_new_prints_the_did_and_did_reads_it_back(run: Run, key_dir: Path) -> None:
    did = run.ok("key", "new", "gw").strip()
    assert did.startswith("did:key:z6Mk")
    path = key_dir / "gw.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["crypto"]["kdfparams"]["n"] == 16
    assert run.ok("key", "did", "gw").strip() == did


def test_new_refuses_to_overwrite(run: Run, key_dir: Path) -> None:
    run.ok("key", "new", "gw")
    before = (key_dir / "gw.json").read_bytes()
    run.fails("key", "new", "gw", match="refusing to overwrite")
    assert (key_dir / "gw.json").read_bytes() == before


def test_list(run: Run) -> None:
    assert run.ok("key", "list") == ""
    assert json.loads(run.ok("key", "list", "--json")) == []
    run.ok("key", "new", "b")
    run.ok("key", "new", "a")
    assert run.ok("key", "list") == "a\nb\n"
    assert json.loads(run.ok("key", "list", "--json")) == ["a", "b"]


def test_key_dir_from_env(run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DMSGW_KEY_DIR", str(tmp_path / "from-env"))
    code, _, err = run("key", "new", "gw", key_dir=False)
    assert code == 0, err
    assert (tmp_path / "from-env" / "gw.json").is_file()


def test_default_key_dir_is_nunets(run: Run, tmp_path: Path) -> None:
    code, _, err = run("key", "new", "gw", key_dir=False)
    assert code == 0, err
    assert (tmp_path / "home" / ".nunet" / "key" / "gw.json").is_file()


def test_a_nunet_written_file_is_read(
    run: Run, key_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_dir.mkdir()
    (key_dir / "dms.json").write_text(GO_FILE)
    monkeypatch.setenv("DMS_PASSPHRASE", VECTOR["passphrase"])
    assert run.ok("key", "did", "dms").strip() == KEY["did"]


# --- key import ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hex_key",
    [
        KEY["seed_hex"],
        KEY["priv_protobuf_hex"],
        KEY["seed_hex"] + KEY["pub_raw_hex"],
        KEY["seed_hex"].upper(),
    ],
    ids=["seed", "protobuf", "seed+pub", "uppercase"],
)
def test_import(run: Run, hex_key: str) -> None:
    assert run.ok("key", "import", "gw", hex_key).strip() == KEY["did"]
    assert run.ok("key", "did", "gw").strip() == KEY["did"]


def test_import_from_stdin(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(KEY["seed_hex"] + "\n"))
    assert run.ok("key", "import", "gw", "-").strip() == KEY["did"]


@pytest.mark.parametrize(
    ("hex_key", "match"),
    [
        ("xyz", "not valid hex"),
        ("abc", "not valid hex"),
        ("", "the private key is empty"),
        ("00" * 31, "31 bytes are neither a libp2p private-key protobuf"),
        (KEY["seed_hex"] + "00" * 32, "public half does not match"),
        ("0801124000", "neither a libp2p private-key protobuf"),
    ],
)
def test_import_rejects_what_is_not_a_key(
    run: Run, key_dir: Path, hex_key: str, match: str
) -> None:
    run.fails("key", "import", "gw", hex_key, match=match)
    assert not (key_dir / "gw.json").exists()


def test_import_refuses_to_overwrite(run: Run) -> None:
    run.ok("key", "new", "gw")
    run.fails("key", "import", "gw", KEY["seed_hex"], match="already exists")


def test_import_does_not_print_the_secret(run: Run) -> None:
    out = run.ok("key", "import", "gw", KEY["seed_hex"])
    assert KEY["seed_hex"] not in out


# --- key export-public ---------------------------------------------------------------------


def test_export_public(run: Run) -> None:
    run.ok("key", "import", "dms", KEY["seed_hex"])
    text = run.ok("key", "export-public", "dms")
    for value in (KEY["did"], KEY["peer_id"], KEY["id_b32"], KEY["pub_protobuf_hex"]):
        assert value in text
    assert KEY["seed_hex"] not in text
    assert json.loads(run.ok("key", "export-public", "dms", "--json")) == {
        "name": "dms",
        "key_type": "Ed25519",
        "did": KEY["did"],
        "peer_id": KEY["peer_id"],
        "actor_id": KEY["id_b32"],
        "public_key_hex": KEY["pub_protobuf_hex"],
    }


# --- errors --------------------------------------------------------------------------------


def test_wrong_passphrase(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    run.ok("key", "new", "gw")
    monkeypatch.setenv("DMS_PASSPHRASE", "other")
    run.fails("key", "did", "gw", match="wrong passphrase")
    run.fails("key", "export-public", "gw", match="wrong passphrase")


def test_missing_key_is_reported_before_asking_for_a_passphrase(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DMS_PASSPHRASE")
    run.fails("key", "did", "nope", match="no key named 'nope'")


def test_damaged_file(run: Run, key_dir: Path) -> None:
    run.ok("key", "new", "gw")
    (key_dir / "gw.json").write_text('{"id": "gw", "version": 3')
    run.fails("key", "did", "gw", match="not a DMS key file")


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "with space"])
def test_bad_names(run: Run, name: str) -> None:
    run.fails("key", "new", name, match="invalid key name")


@pytest.mark.parametrize("value", [None, ""])
def test_no_passphrase_and_no_terminal(
    run: Run, key_dir: Path, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("DMS_PASSPHRASE")
    else:
        monkeypatch.setenv("DMS_PASSPHRASE", value)
    run.fails("key", "new", "gw", match="set DMS_PASSPHRASE")
    run.fails("whoami", match="set DMS_PASSPHRASE")
    assert not key_dir.exists()


def test_prompted_passphrases_must_match(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    _prompt(monkeypatch, ["one", "two"])
    run.fails("key", "new", "gw", match="the two passphrases differ")


def test_bad_test_scrypt_n(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1000")
    run.fails("key", "new", "gw", match="DMSGW_TEST_SCRYPT_N")


# --- whoami --------------------------------------------------------------------------------


def _prompt(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> None:
    replies = iter(answers)
    monkeypatch.delenv("DMS_PASSPHRASE", raising=False)
    monkeypatch.setattr(keystore, "_can_prompt", lambda: True)
    monkeypatch.setattr(keystore.getpass, "getpass", lambda prompt: next(replies))


def test_whoami_creates_the_key_once_then_reuses_it(run: Run, key_dir: Path) -> None:
    code, out, err = run("whoami")
    assert code == 0
    assert err == f"dmsgw: created key 'dmsgw' in {key_dir}\n"
    did = run.ok("key", "did", "dmsgw").strip()
    assert f"  DID       {did}\n" in out
    assert f"  nunet cap grant --context dms --cap /dms/node --duration 8760h {did}\n" in out
    assert (
        "  nunet cap grant --context dms --cap /dms/node/deployment --cap /dms/node/resources "
        f"--cap /dms/node/peers --duration 8760h {did}\n" in out
    )
    code, again, err = run("whoami")
    assert (code, err) == (0, "")
    assert again == out


def test_whoami_prompts_twice_when_creating(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    _prompt(monkeypatch, ["secret", "secret"])
    run.ok("whoami", "--key", "gw")
    _prompt(monkeypatch, ["secret"])  # unlocking asks once
    assert "did:key:" in run.ok("key", "did", "gw")


def test_whoami_json_of_an_imported_key(run: Run, key_dir: Path) -> None:
    run.ok("key", "import", "node", KEY["seed_hex"])
    info: dict[str, Any] = json.loads(run.ok("whoami", "--key", "node", "--json"))
    assert info["did"] == KEY["did"]
    assert info["peer_id"] == KEY["peer_id"]
    assert info["actor_id"] == KEY["id_b32"]
    assert info["key_file"] == str(key_dir / "node.json")
    assert info["grant_command"] == (
        f"nunet cap grant --context dms --cap /dms/node --duration 8760h {KEY['did']}"
    )
    assert info["grant_command_least_privilege"].endswith(f"--duration 8760h {KEY['did']}")


def test_whoami_bad_key_name(run: Run) -> None:
    run.fails("whoami", "--key", "a/b", match="invalid key name")
