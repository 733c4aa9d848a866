"""``dmsgw cap …`` through the real entry point (``dmsgw.cli.main``).

The CLI's clock is pinned (``cli.cap.common.clock``) so expiries are exact and "later" needs
no sleep; scrypt runs with N=16 through ``$DMSGW_TEST_SCRYPT_N``. Keys and contexts live in
``tmp_path`` through ``$DMSGW_KEY_DIR`` and ``$DMSGW_CAP_DIR``.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from dmsgw import cli
from dmsgw.cli import cap as cli_cap
from dmsgw.cli.cap import common as cap_common
from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys import keystore
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import Action, Token, TokenList, load_context, unmarshal_token_list
from dmsgw.keys.ucan.expiry import parse_expiry
from dmsgw.transport import envelope as env
from dmsgw.transport.security import SecurityContext
from tests.support.vectors import load_vector

NOW = 1_767_225_600 * NS_PER_SECOND  # 2026-01-01T00:00:00Z
HOUR = 3600 * NS_PER_SECOND
YEAR = 8760 * HOUR
VECTORS = load_vector("tokens.json")
KEYS = VECTORS["keys"]
GO_GRANT = VECTORS["tokens"]["grant_dms_to_gateway_dms_node"]["tokens_json"]
GO_INVOKE = VECTORS["tokens"]["invoke_gateway_chained"]["tokens_json"]
OTHER_DID = KEYS["other"]["did"]


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: FixedClock) -> None:
    monkeypatch.setattr(cap_common, "clock", clock)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # never touch the real ~/.nunet
    monkeypatch.setenv("DMSGW_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("DMSGW_CAP_DIR", str(tmp_path / "cap"))
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "16")
    monkeypatch.setenv("DMS_PASSPHRASE", "pw")
    monkeypatch.setattr(keystore, "_can_prompt", lambda: False)


@pytest.fixture
def cap_dir(tmp_path: Path) -> Path:
    return tmp_path / "cap"


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "keys"


class Run:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        try:
            code = cli.main(["cap", *argv])
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str) -> str:
        code, out, err = self(*argv)
        assert code == 0, err
        return out

    def fails(self, *argv: str, match: str) -> str:
        code, out, err = self(*argv)
        assert code == 2, (out, err)
        assert out == ""
        assert err.startswith("dmsgw: error: ") and err.count("\n") == 1, err
        assert match in err, err
        return err

    def usage_error(self, *argv: str, match: str) -> None:
        code, out, err = self(*argv)
        assert code == 2 and out == ""
        assert match in err, err

    def check(self, *argv: str) -> tuple[int, str]:
        code, out, err = self("check", *argv)
        assert code in (0, 1), err
        return code, out

    def tokens(self, *argv: str) -> TokenList:
        return unmarshal_token_list(self.ok(*argv).encode())


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    return Run(capsys)


@pytest.fixture
def contexts(run: Run) -> tuple[str, str]:
    """The DMS's context ``dms`` and the gateway's ``dmsgw``: their DIDs."""
    return run.ok("new", "dms").strip(), run.ok("new", "dmsgw").strip()


def _grant(run: Run, gw: str, *caps: str, extra: tuple[str, ...] = ()) -> str:
    flags = [arg for cap in caps for arg in ("--cap", cap)]
    return run.ok("grant", "-c", "dms", *flags, "--duration", "8760h", *extra, gw).strip()


@pytest.fixture
def anchored(run: Run, contexts: tuple[str, str]) -> tuple[str, str]:
    """The gateway holds the DMS's grant of /dms/node as a provide anchor."""
    dms, gw = contexts
    run.ok("anchor", "--context", "dmsgw", "--provide", _grant(run, gw, "/dms/node"))
    return dms, gw


def _envelope(
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    behavior: str,
    invoke: tuple[str, ...] | None = None,
) -> bytes:
    """What the gateway would POST: signed by the dmsgw key, tokens from its context."""
    key = KeyStore(key_dir).priv_key("dmsgw", "pw")
    ctx = load_context("dmsgw", provider_from_private_key(key), directory=cap_dir, clock=clock)
    security = SecurityContext(key, ctx, clock=clock)
    dms = env.Handle.from_did(load_context("dms", directory=cap_dir).did.uri)
    source = env.Handle(security.id, ctx.did, env.Address(dms.addr.host, "user-1"))
    msg = env.message(
        source,
        dms,
        behavior,
        reply_to="/private/user/1",
        expire=clock() + 60 * NS_PER_SECOND,
        nonce=security.nonce(),
    )
    return marshal(security.provide(msg, invoke or (behavior,)))


def _write(tmp_path: Path, data: bytes | str, name: str = "msg.json") -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def test_the_cap_family_is_registered() -> None:
    """``dmsgw cap …`` is parsed by the cap family and runs its commands."""
    assert cli.build_parser("cap").parse_args(["cap", "show"]).handler is cli_cap.cmd_show


# --- new -----------------------------------------------------------------------------------


def test_new_creates_the_key_and_an_empty_context(run: Run, cap_dir: Path, key_dir: Path) -> None:
    code, out, err = run("new", "gw")
    assert code == 0
    did = out.strip()
    assert f"created key 'gw' in {key_dir}" in err
    assert f"created capability context 'gw' in {cap_dir / 'gw.cap'}" in err
    assert KeyStore(key_dir).priv_key("gw", "pw").public_key() == DID(did).public_key()
    ctx = load_context("gw", directory=cap_dir)
    assert ctx.did.uri == did
    assert ctx.list_roots() == ([], TokenList(), TokenList(), TokenList())


def test_new_uses_an_existing_key(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["key", "new", "gw"])
    did = capsys.readouterr().out.strip()
    code, out, err = run("new", "gw")
    assert (code, out.strip()) == (0, did)
    assert "using key 'gw'" in err


def test_new_refuses_to_overwrite_a_context(run: Run, cap_dir: Path) -> None:
    run.ok("new", "gw")
    before = (cap_dir / "gw.cap").read_bytes()
    run.fails("new", "gw", match="refusing to overwrite")
    assert (cap_dir / "gw.cap").read_bytes() == before


def test_new_with_the_wrong_passphrase(
    run: Run, cap_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["key", "new", "gw"])
    capsys.readouterr()
    monkeypatch.setenv("DMS_PASSPHRASE", "other")
    run.fails("new", "gw", match="wrong passphrase")
    assert not (cap_dir / "gw.cap").exists()


@pytest.mark.parametrize("name", ["a/b", ".hidden", "ledger:0"])
def test_new_bad_names(run: Run, name: str) -> None:
    """A context is named after its key file; ledger contexts are not supported."""
    run.fails("new", name, match="invalid key name")


def test_new_without_a_passphrase(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DMS_PASSPHRASE")
    run.fails("new", "gw", match="set DMS_PASSPHRASE")


def test_directories_from_flags_and_the_nunet_default(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run.ok("new", "a", "--cap-dir", str(tmp_path / "c"), "--key-dir", str(tmp_path / "k"))
    assert (tmp_path / "c" / "a.cap").is_file() and (tmp_path / "k" / "a.json").is_file()
    monkeypatch.delenv("DMSGW_CAP_DIR")
    monkeypatch.delenv("DMSGW_KEY_DIR")
    run.ok("new", "b")
    nunet = tmp_path / "home" / ".nunet"
    assert (nunet / "cap" / "b.cap").is_file() and (nunet / "key" / "b.json").is_file()


# --- show / list ---------------------------------------------------------------------------


def test_show_describes_every_anchor(
    run: Run, anchored: tuple[str, str], cap_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dms, gw = anchored
    run.ok("anchor", "-c", "dmsgw", "--root", OTHER_DID)
    monkeypatch.delenv("DMS_PASSPHRASE")  # reading a context needs no key
    text = run.ok("show", "dmsgw")
    assert text.startswith(f"context  dmsgw  ({cap_dir / 'dmsgw.cap'})\nDID      {gw}\n")
    assert f"roots (1)\n  {OTHER_DID}\n" in text
    assert "require (0)\n" in text and "revoke (0)" in text
    assert f"provide (1)\n  1. delegate: {dms} -> {gw}\n" in text
    assert "         caps      /dms/node\n" in text
    assert "         audience  any\n" in text
    assert "         expires   2027-01-01T00:00:00Z (in 365d)\n" in text
    assert "         depth     unlimited\n" in text
    assert run.ok("list", "-c", "dmsgw") == text
    assert run.ok("show", "dmsgw", "--json") == (cap_dir / "dmsgw.cap").read_text()


def test_show_defaults_to_the_gateway_context(run: Run, contexts: tuple[str, str]) -> None:
    assert f"DID      {contexts[1]}\n" in run.ok("show")


def test_show_a_chained_token_and_its_limits(run: Run, contexts: tuple[str, str]) -> None:
    dms, gw = contexts
    run.ok("anchor", "--provide", _grant(run, gw, "/dms/node", extra=("-t", "/nunet")))
    flags = ["--cap", "/dms/node/peers", "-t", "/nunet", "-d", "2", "--duration", "1h"]
    delegation = run.ok("delegate", *flags, "-a", dms, OTHER_DID)
    run.ok("anchor", "-c", "dms", "--require", delegation)
    text = run.ok("show", "dms")
    assert f"require (1)\n  1. delegate: {gw} -> {OTHER_DID}\n" in text
    assert "         topics    /nunet\n" in text
    assert f"         audience  {dms}\n" in text
    assert "         expires   2026-01-01T01:00:00Z (in 1h)\n" in text
    assert "         depth     2 (at most 2 token(s) may be chained below it)\n" in text
    assert f"         chained on\n           delegate: {dms} -> {gw}\n" in text
    assert "               topics    /nunet\n" in text


def test_show_errors(run: Run, contexts: tuple[str, str]) -> None:
    run.fails("show", "nope", match="no capability context 'nope'")
    run.fails("show", "dms", "-c", "dmsgw", match="two contexts named")


# --- anchor / remove -----------------------------------------------------------------------


def test_root_anchors_are_added_once_and_removed(
    run: Run, contexts: tuple[str, str], cap_dir: Path
) -> None:
    out = run.ok("anchor", "-c", "dms", "--root", OTHER_DID)
    assert out == f"+ root     {OTHER_DID}\nsaved {cap_dir / 'dms.cap'}\n"
    assert (cap_dir / f"dms.cap.{NOW // NS_PER_SECOND}").is_file()  # the previous version
    assert load_context("dms", directory=cap_dir).list_roots()[0] == [DID(OTHER_DID)]
    assert "unchanged" in run.ok("anchor", "-c", "dms", "--root", OTHER_DID)
    assert run.ok("anchor", "-c", "dms", "--remove", "--root", OTHER_DID).startswith(
        f"- root     {OTHER_DID}\n"
    )
    assert load_context("dms", directory=cap_dir).list_roots()[0] == []
    run.fails("remove", "-c", "dms", "--root", OTHER_DID, match="none of the given anchors")


def test_a_provide_anchor_from_a_file_stdin_or_as_one_token(
    run: Run,
    contexts: tuple[str, str],
    cap_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grant = _grant(run, contexts[1], "/dms/node")
    token = unmarshal_token_list(grant.encode()).present()[0]
    run.ok("anchor", "--provide", "@" + _write(tmp_path, grant))
    assert load_context("dmsgw", directory=cap_dir).list_roots()[2].present() == (token,)
    run.ok("remove", "--provide", token.to_json().decode())  # one token, as nunet remove takes
    assert not load_context("dmsgw", directory=cap_dir).list_roots()[2].present()
    monkeypatch.setattr("sys.stdin", io.StringIO(grant))
    assert "+ provide" in run.ok("anchor", "--provide", "-")


def test_anchoring_right_after_whoami(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    """The step ``dmsgw whoami`` prints works as printed: the context is created for the key."""
    cli.main(["whoami"])
    out = capsys.readouterr().out
    assert "dmsgw cap anchor --context dmsgw --provide '<token list JSON>'" in out
    gw = next(line.split()[1] for line in out.splitlines() if line.strip().startswith("DID"))
    run.ok("new", "dms")
    code, out, err = run("anchor", "--context", "dmsgw", "--provide", _grant(run, gw, "/dms"))
    assert code == 0, err
    assert "creating capability context 'dmsgw' for key 'dmsgw'" in err
    assert "+ provide" in out


def test_a_go_grant_is_anchored_and_delegated_from(
    run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["key", "import", "gw", KEYS["gateway"]["seed_hex"]])
    capsys.readouterr()
    run.ok("new", "gw")
    run.ok("anchor", "-c", "gw", "--provide", GO_GRANT)
    third = KEYS["third"]["did"]
    tokens = run.tokens("delegate", "-c", "gw", "--cap", "/dms/node", "--auto-expire", third)
    (token,) = tokens.present()
    go_grant = unmarshal_token_list(GO_GRANT.encode()).present()[0]
    assert token.dms is not None and token.dms.chain == go_grant
    assert token.subject() == DID(third) and token.expire() == go_grant.expire()
    token.verify(NOW)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("{", "--provide is not valid JSON: unexpected end of JSON input"),
        ("nope", "--provide is not valid JSON: invalid character 'o' in literal null"),
        ("[]", "--provide is a JSON array, not an object"),
        ('{"foo": 1}', "neither a token list"),
        ("{}", "--provide holds no tokens"),
        ('{"tok": [null]}', "--provide holds a null token"),
        ('{"tok": 5}', "--provide: unmarshal tokens: json: cannot unmarshal number"),
        ("@/nonexistent/grant.json", "--provide: cannot read /nonexistent/grant.json"),
    ],
)
def test_anchor_rejects_bad_token_json(
    run: Run, contexts: tuple[str, str], value: str, match: str
) -> None:
    run.fails("anchor", "--provide", value, match=match)


def test_anchor_rejects_tokens_that_could_never_serve(
    run: Run, contexts: tuple[str, str], clock: FixedClock
) -> None:
    gw = contexts[1]
    run.fails(
        "anchor", "-c", "dms", "--provide", _grant(run, gw, "/dms/node"), match="wrong --context"
    )
    run.fails("anchor", "--provide", GO_INVOKE, match="is not a delegation")
    grant = json.loads(_grant(run, gw, "/dms/node"))
    grant["tok"][0]["dms"]["cap"] = ["/"]
    run.fails("anchor", "--provide", json.dumps(grant), match="signature verification failed")
    short = run.ok("grant", "-c", "dms", "--cap", "/dms", "--duration", "1h", gw)
    clock.advance(2 * 3600)
    run.fails("anchor", "--provide", short, match="provide anchor rejected (capability expired)")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("anchor",), "give at least one of --root"),
        (("anchor", "--root", "did:key"), "invalid root DID 'did:key'"),
        (("anchor", "--root", "did:key:zzz"), "invalid root DID"),
        (("anchor", "-c", "nope", "--root", OTHER_DID), "create both with `dmsgw cap new nope`"),
        (("anchor", "--require", "-", "--provide", "-"), "only one option can read"),
    ],
)
def test_anchor_errors(
    run: Run, contexts: tuple[str, str], argv: tuple[str, ...], match: str
) -> None:
    run.fails(*argv, match=match)


# --- grant ---------------------------------------------------------------------------------


def test_grant_prints_nunets_token_list(
    run: Run, contexts: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dms, gw = contexts
    code, out, err = run(
        "grant", "--context", "dms", "--cap", "/dms/node", "--duration", "8760h", gw
    )
    assert code == 0
    tokens = unmarshal_token_list(out.encode())
    assert out == tokens.to_json().decode() + "\n"  # one line of Go JSON, as nunet prints
    (token,) = tokens.present()
    token.verify(NOW)
    d = token.dms
    assert d is not None
    assert (d.action, d.issuer, d.subject, d.audience) == (
        Action.DELEGATE,
        DID(dms),
        DID(gw),
        DID(),
    )
    assert (d.capability, d.topic, d.expire, d.depth, d.chain) == (
        ("/dms/node",),
        None,
        NOW + YEAR,
        0,
        None,
    )
    assert '"aud":{},"cap":["/dms/node"],"nonce":' in out and '"depth"' not in out
    assert "issued delegate token" in err and "(in 365d)" in err


def test_grant_with_every_option(run: Run, contexts: tuple[str, str]) -> None:
    dms, gw = contexts
    caps = ["--cap", "/dms/node/peers,/dms/node/resources", "--cap", "/public", "-t", "/nunet"]
    expiry = "2026-12-31T23:59:59.5+01:00"
    tokens = run.tokens("grant", "-c", "dms", *caps, "-a", dms, "-d", "1", "-e", expiry, gw)
    d = tokens.present()[0].dms
    assert d is not None
    assert d.capability == ("/dms/node/peers", "/dms/node/resources", "/public")
    assert (d.topic, d.audience, d.depth) == (("/nunet",), DID(dms), 1)
    assert d.expire == parse_expiry("2026-12-31T22:59:59.5Z")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--duration", "8760h"), "no --cap given"),
        (("--cap", "dms/node", "--duration", "1h"), "a capability is a path starting with '/'"),
        (("--cap", "/a,,/b", "--duration", "1h"), "--cap '': a capability is a path"),
        (("--cap", "/dms", "--duration", "8760"), 'time: missing unit in duration "8760"'),
        (("--cap", "/dms", "--duration", "1y"), 'time: unknown unit "y" in duration "1y"'),
        (("--cap", "/dms", "--duration=-1h"), "must be positive"),
        (("--cap", "/dms", "--expiry", "2025-12-31"), "is in the past (2025-12-31T00:00:00Z)"),
        (("--cap", "/dms", "--expiry", "tomorrow"), "--expiry 'tomorrow': use 2025-12-31"),
        (("--cap", "/dms", "--expiry", "2026-02-30"), "day is out of range for month"),
        (("--cap", "/dms", "--expiry", "31 Dec 26 23:59 PST"), "--expiry '31 Dec 26 23:59 PST'"),
        (("--cap", "/dms", "-d", "-1", "--duration", "1h"), "--depth -1: must be between 0"),
        (("--cap", "/dms", "-a", "did:x", "--duration", "1h"), "invalid audience DID 'did:x'"),
    ],
)
def test_grant_input_errors(
    run: Run, contexts: tuple[str, str], argv: tuple[str, ...], match: str
) -> None:
    run.fails("grant", "-c", "dms", *argv, contexts[1], match=match)


def test_grant_subject_and_key_errors(
    run: Run, contexts: tuple[str, str], key_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = contexts[1]
    base = ("grant", "-c", "dms", "--cap", "/dms", "--duration", "1h")
    run.fails(*base, "did:key:z6Mkxyz", match="invalid subject DID")
    run.fails(*base, "dmsgw", match="invalid subject DID 'dmsgw'")
    run.fails(
        "grant", "-c", "nope", "--cap", "/dms", "--duration", "1h", gw, match="`dmsgw cap new nope`"
    )
    monkeypatch.setenv("DMS_PASSPHRASE", "other")
    run.fails(*base, gw, match="wrong passphrase")
    (key_dir / "dms.json").unlink()
    run.fails(*base, gw, match="no key named 'dms'")


def test_a_context_of_another_key_is_refused(
    run: Run, contexts: tuple[str, str], cap_dir: Path
) -> None:
    (cap_dir / "dms.cap").write_bytes((cap_dir / "dmsgw.cap").read_bytes())
    grant = ["grant", "-c", "dms", "--cap", "/dms", "--duration", "1h"]
    run.fails(*grant, OTHER_DID, match="not to did:key:")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (("--cap", "/dms", OTHER_DID), "one of the arguments -e/--expiry --duration is required"),
        (("--cap", "/dms", "-e", "2027-01-01", "--duration", "1h", OTHER_DID), "not allowed with"),
        (("--cap", "/dms", "--duration", "1h"), "the following arguments are required"),
    ],
)
def test_grant_usage_errors(run: Run, argv: tuple[str, ...], match: str) -> None:
    run.usage_error("grant", *argv, match=match)


# --- delegate ------------------------------------------------------------------------------


def test_delegate_chains_on_the_provide_anchor(run: Run, anchored: tuple[str, str]) -> None:
    dms, gw = anchored
    (token,) = run.tokens(
        "delegate", "--cap", "/dms/node/peers", "--duration", "1h", OTHER_DID
    ).present()
    token.verify(NOW)
    d = token.dms
    assert d is not None and d.chain is not None
    assert (d.issuer, d.subject, d.capability, d.expire) == (
        DID(gw),
        DID(OTHER_DID),
        ("/dms/node/peers",),
        NOW + HOUR,
    )
    assert d.chain.issuer() == DID(dms)


def test_delegate_tells_apart_the_tokens_chained_on_each_anchor(
    run: Run, anchored: tuple[str, str]
) -> None:
    dms, gw = anchored
    other_dms = run.ok("new", "dms2").strip()  # a second DMS grants /dms/node too
    grant = ["grant", "-c", "dms2", "--cap", "/dms/node", "--duration", "8760h", gw]
    run.ok("anchor", "--context", "dmsgw", "--provide", run.ok(*grant).strip())
    code, out, err = run("delegate", "--cap", "/dms/node/peers", "--duration", "1h", OTHER_DID)
    assert code == 0 and len(unmarshal_token_list(out.encode()).present()) == 2
    line = f"dmsgw: issued delegate token from {gw} to {OTHER_DID} for [/dms/node/peers], chained "
    assert sorted(err.splitlines()) == sorted(
        f"{line}on a grant from {issuer}, expiring 2026-01-01T01:00:00Z (in 1h)"
        for issuer in (dms, other_dms)
    )


@pytest.mark.parametrize(("mode", "chained"), [("also", [True, False]), ("only", [False])])
def test_delegate_self_signed(
    run: Run, anchored: tuple[str, str], mode: str, chained: list[bool]
) -> None:
    tokens = run.tokens(
        "delegate", "--cap", "/dms/node", "--duration", "1h", "--self-sign", mode, OTHER_DID
    ).present()
    assert [t.dms is not None and t.dms.chain is not None for t in tokens] == chained
    for t in tokens:
        t.verify(NOW)


def test_delegate_explains_why_no_anchor_allows_it(run: Run, contexts: tuple[str, str]) -> None:
    gw = contexts[1]
    base = ("delegate", "--duration", "1h", OTHER_DID)
    run.fails(
        *base, "--cap", "/dms", match="context 'dmsgw' has no provide anchor to delegate from"
    )
    grant = _grant(run, gw, "/dms/node/resources")
    run.ok("anchor", "--provide", grant)
    run.fails(*base, "--cap", "/dms/node/deployment", match="does not cover /dms/node/deployment")
    run.fails(*base, "--cap", "/dms/node/resources", "-t", "/nunet", match="does not cover topics")
    longer = ["delegate", "--cap", "/dms/node/resources", "--duration", "9000h"]
    err = run.fails(*longer, OTHER_DID, match="expires before 2027-01-11T00:00:00Z")
    assert "no provide anchor of context 'dmsgw' allows this delegation" in err
    run.ok("remove", "--provide", grant)
    run.ok("anchor", "--provide", _grant(run, gw, "/dms/node/resources", extra=("-d", "1")))
    run.fails(*base, "--cap", "/dms/node/resources", match="allows no further delegation")


def test_delegate_flag_errors(run: Run, anchored: tuple[str, str]) -> None:
    delegate = ("delegate", "--cap", "/dms", OTHER_DID)
    run.fails(
        *delegate,
        "--auto-expire",
        "--self-sign",
        "also",
        match="--auto-expire makes each token expire with its provide anchor",
    )
    run.usage_error(
        *delegate, "--duration", "1h", "--self-sign", "yes", match="invalid choice: 'yes'"
    )
    run.usage_error(
        *delegate, "--duration", "1h", "--auto-expire", match="not allowed with argument"
    )


# --- revoke --------------------------------------------------------------------------------


def test_revoke_prints_go_revocations_and_keeps_them(
    run: Run, contexts: tuple[str, str], cap_dir: Path
) -> None:
    gw = contexts[1]
    grant = _grant(run, gw, "/dms/node")
    granted = unmarshal_token_list(grant.encode()).present()[0]
    code, out, err = run("revoke", "-c", "dms", grant)
    assert code == 0, err
    revocation = Token.from_json(out)  # one token a line, as nunet cap revoke prints
    assert out == revocation.to_json().decode() + "\n"
    assert '"act":"revoke"' in out and '"aud":{},"cap":null' in out
    assert revocation.revocation_key() == granted.revocation_key()
    assert revocation.expire() == granted.expire()
    revocation.verify(NOW)
    assert load_context("dms", directory=cap_dir).list_roots()[3].present() == (revocation,)
    assert "revoke (1)\n  1. revoke: " in run.ok("show", "dms")
    run.ok("anchor", "-c", "dmsgw", "--revoke", out)  # what another verifier would do


def test_revoke_errors(run: Run, contexts: tuple[str, str], clock: FixedClock) -> None:
    run.fails("revoke", "-c", "dms", GO_GRANT, match="cannot revoke delegate token")
    run.fails("revoke", "-c", "dms", "{", match="TOKENS is not valid JSON")
    short = run.ok("grant", "-c", "dms", "--cap", "/dms", "--duration", "1h", contexts[1])
    clock.advance(2 * 3600)
    run.fails("revoke", "-c", "dms", short, match="has already expired: there is nothing to revoke")


# --- check ---------------------------------------------------------------------------------


def test_check_accepts_an_envelope_chained_on_the_dms_grant(
    run: Run,
    anchored: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    dms, gw = anchored
    msg = _envelope(key_dir, cap_dir, clock, "/dms/node/peers/list")
    code, out = run.check(_write(tmp_path, msg))
    assert code == 0
    assert out.startswith(
        f"checked an envelope against the DMS {dms} (context file {cap_dir / 'dms.cap'})\n"
        "accepted: the DMS would dispatch this message\n"
        f"  - authorized by invoke token from {gw} to {gw} for [/dms/node/peers/list]"
    )
    verdict: dict[str, Any] = json.loads(run.check(_write(tmp_path, msg), "--json")[1])
    assert verdict["accepted"] is True and verdict["stage"] == "accepted"
    assert (verdict["checked"], verdict["dms"]) == ("envelope", dms)


def test_check_refuses_a_narrower_grant_with_not_implied(
    run: Run,
    contexts: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    gw = contexts[1]
    run.ok("anchor", "--provide", _grant(run, gw, "/dms/node/resources"))
    msg = _envelope(key_dir, cap_dir, clock, "/dms/node/deployment/new", ("/dms/node/resources",))
    code, out = run.check(_write(tmp_path, msg))
    assert code == 1
    assert "refused at capability: requiring capabilities: not authorized\n" in out
    assert "  - not_implied: invoke token from" in out
    verdict = json.loads(run.check(_write(tmp_path, msg), "--json")[1])
    assert verdict["accepted"] is False and verdict["stage"] == "capability"
    assert "not_implied" in {r["reason"] for r in verdict["rejections"]}


def test_check_refuses_an_expired_envelope_at_verify(
    run: Run,
    anchored: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, _envelope(key_dir, cap_dir, clock, "/dms/node/peers/list"))
    clock.advance(61)
    code, out = run.check(path)
    assert code == 1
    assert "refused at verify: message expired\n  - opt.exp passed 1.000 s ago" in out


def test_check_after_the_dms_revoked_the_grant(
    run: Run,
    anchored: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, _envelope(key_dir, cap_dir, clock, "/dms/node/peers/list"))
    grant = load_context("dmsgw", directory=cap_dir).list_roots()[2]
    run.ok("revoke", "-c", "dms", grant.to_json().decode())
    code, out = run.check(path)
    assert code == 1 and "  - revoked: " in out


def test_check_an_envelope_without_tokens_and_unknown_behaviors(
    run: Run,
    anchored: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
) -> None:
    msg = env.decode(_envelope(key_dir, cap_dir, clock, "/dms/node/peers/list"))
    key = KeyStore(key_dir).priv_key("dmsgw", "pw")
    bare = marshal(env.sign(dataclasses.replace(msg, cap=None), key))
    code, out = run.check(_write(tmp_path, bare))
    assert code == 1 and "cap is mandatory" in out
    odd = _envelope(key_dir, cap_dir, clock, "/dms/node/nope")
    assert (
        "refused at behavior: unknown behavior '/dms/node/nope'"
        in run.check(_write(tmp_path, odd))[1]
    )
    code, out = run.check(_write(tmp_path, odd), "--no-known-behaviors")
    assert code == 0
    code, out = run.check(_write(tmp_path, odd), "--cap", "/dms/node/peers/list")
    assert code == 1 and "unknown behavior" in out


def test_check_a_token_list_without_an_envelope(
    run: Run,
    anchored: tuple[str, str],
    key_dir: Path,
    cap_dir: Path,
    clock: FixedClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dms, gw = anchored
    msg = env.decode(_envelope(key_dir, cap_dir, clock, "/dms/node/peers/list"))
    assert msg.cap is not None
    path = _write(tmp_path, msg.cap, "tokens.json")
    code, out = run.check(path, "--behavior", "/dms/node/peers/list")
    assert code == 0
    assert out.startswith(f"checked tokens against the DMS {dms}")
    assert f"note: tokens presented by {gw} for [/dms/node/peers/list]; with no envelope" in out
    code, out = run.check(path, "--behavior", "/dms/node/deployment/new")
    assert code == 1 and "not_implied" in out
    code, out = run.check(path, "--cap", "/dms/node/peers/list", "--from", OTHER_DID)
    assert code == 1 and "wrong_subject" in out
    code, out = run.check(path, "--behavior", "/dms/node/nope")
    assert code == 1 and "refused at behavior" in out
    monkeypatch.setattr("sys.stdin", io.StringIO(msg.cap.decode()))
    verdict = json.loads(run.check("-", "--behavior", "/dms/node/peers/list", "--json")[1])
    assert verdict["checked"] == "tokens" and verdict["accepted"] is True
    assert "address, expiry and signature were not checked" in verdict["note"]


def test_check_against_anchors_from_the_command_line(run: Run, tmp_path: Path) -> None:
    """No DMS files: its DID and anchors on the command line (Go-made tokens, Go verdicts)."""
    dms, gw = KEYS["dms"]["did"], KEYS["gateway"]["did"]
    chained = _write(tmp_path, GO_INVOKE, "chained.json")
    assert run.check(chained, "--dms-did", dms, "--behavior", "/dms/node/peers/list")[0] == 0
    self_signed = _write(
        tmp_path, VECTORS["tokens"]["self_signed_invoke_gateway"]["tokens_json"], "self.json"
    )
    base = (self_signed, "--dms-did", dms, "--behavior", "/dms/node/peers/list")
    code, out = run.check(*base)
    assert code == 1 and "untrusted_issuer" in out
    assert run.check(*base, "--root", gw)[0] == 0
    revocation = VECTORS["tokens"]["revocation_of_grant"]["tokens_json"]
    code, out = run.check(chained, "--dms-did", dms, "--cap", "/dms/node", "--revoke", revocation)
    assert code == 1 and "revoked" in out


@pytest.mark.parametrize(
    ("content", "argv", "match"),
    [
        ("not json", (), "FILE is not valid JSON: invalid character 'o' in literal null"),
        ('"text"', (), "FILE is a JSON string, not an object"),
        ('{"x": 1}', ("--cap", "/dms"), "FILE is neither a token list"),
        (GO_INVOKE, (), "say what it should allow with --behavior or --cap"),
        (
            GO_INVOKE,
            ("--cap", "/dms", "--from", "did:web:example.com"),
            "give --from with the did:key",
        ),
        ('{"be": "/dms/node/peers/list"}', ("--behavior", "/x"), "FILE is an envelope"),
        (GO_INVOKE, ("--cap", "/dms", "--dms-did", "did:web:x"), "a DMS's DID is a did:key"),
        (GO_INVOKE, ("--cap", "/dms", "--dms-context", "nope"), "no capability context 'nope'"),
        (GO_INVOKE, ("--cap", "/dms"), "copy the DMS's dms.cap there, or give --dms-did"),
        (
            GO_INVOKE,
            ("--cap", "/dms", "--dms-did", KEYS["dms"]["did"], "--require", "{}"),
            "--require holds no tokens",
        ),
    ],
)
def test_check_bad_input(
    run: Run, tmp_path: Path, content: str, argv: tuple[str, ...], match: str
) -> None:
    run.fails("check", _write(tmp_path, content), *argv, match=match)


def test_check_usage_errors(run: Run, tmp_path: Path) -> None:
    run.fails("check", str(tmp_path / "missing.json"), match="FILE: cannot read")
    path = _write(tmp_path, GO_INVOKE)
    both = ("--dms-context", "dms", "--dms-did", OTHER_DID)
    run.usage_error("check", path, *both, match="not allowed with argument")
