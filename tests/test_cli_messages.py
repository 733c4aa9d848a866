"""Messages that tell the user what to do (issue 26, items 7 and 11), through ``dmsgw``'s own
entry point: a DMS URL that is wrong in each common way, ``dmsgw pods`` pointed at the wrong
port or without its token, pod names that carry terminal escapes."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dmsgw.behaviors import session
from dmsgw.cli import main
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.keystore import KeyStore
from dmsgw.transport import rest

KEY = Ed25519PrivKey(bytes(range(90, 122)))
Answer = Callable[[str, dict[str, str]], tuple[int, str, bytes]]
"""``(path, headers) -> (status, content type, body)``."""


@contextlib.contextmanager
def serving(answer: Answer) -> Iterator[str]:
    """An HTTP server on a free loopback port answering every GET with ``answer``;
    its ``host:port``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, kind, body = answer(self.path, dict(self.headers))
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def web_page(path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    page = "<!DOCTYPE html>\n<html><head><title>Not Found</title></head>\n<body>" + "x" * 5000
    return 404, "text/html", (page + "</body></html>").encode()


@pytest.fixture
def client_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A gateway key ``gw`` on disk; the options that use it (no DMS URL in the environment,
    no devnet running)."""
    monkeypatch.setenv("DMS_PASSPHRASE", "pw")
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    monkeypatch.delenv("DMSGW_DMS_URL", raising=False)
    KeyStore(tmp_path / "key").save("gw", marshal_private_key(KEY), "pw")
    return ["--key", "gw", "--key-dir", str(tmp_path / "key"), "--cap-dir", str(tmp_path / "cap")]


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("dmsgw: error: ") and err.count("\n") == 1, err
    return err


def test_no_dms_at_the_default_url_hints_devnet_up_or_url(
    client_args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(web_page) as address:  # a port that was free, and is again once it stops
        pass
    monkeypatch.setattr(rest, "DEFAULT_URL", f"http://{address}")
    monkeypatch.setattr(session, "DEFAULT_URL", f"http://{address}")
    assert main(["invoke", "/dms/node/peers/list", *client_args]) == 2
    err = _error(capsys)
    assert "start one with `dmsgw devnet up`, or name yours with --url" in err


def test_a_url_that_is_not_a_dms_is_one_line_naming_the_page(
    client_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(web_page) as address:
        argv = ["invoke", "/dms/node/peers/list", "--url", f"http://{address}"]
        assert main([*argv, *client_args]) == 2
    err = _error(capsys)
    assert "HTTP 404: a web page: 'Not Found', not the DMS API" in err
    assert "<" not in err and "Is this the address of a DMS's REST API?" in err


def test_a_url_naming_the_api_path_hints_the_base(
    client_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(web_page) as address:
        argv = ["invoke", "/dms/node/peers/list", "--url", f"http://{address}/api/v1/"]
        assert main([*argv, *client_args]) == 2
    assert f"without /api/v1: try --url http://{address}\n" in _error(capsys)


def operator_port(path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    if headers.get("Authorization") != "Bearer t0ken":
        return 401, "text/plain", b"the operator port needs the bearer token"
    pod = {"namespace": "default", "name": "evil\x1b[2J\x1b]0;owned\x07", "phase": "Running"}
    return 200, "application/json", json.dumps([pod]).encode()


def plugin_port(path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    return 404, "text/plain", b"404: Not Found"


def test_pods_on_the_plugin_port_says_which_port_it_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with serving(plugin_port) as address:
        assert main(["pods", "--operator", address]) == 2
    assert "is this the plugin port? `dmsgw pods` reads the operator port" in _error(capsys)


def test_pods_without_its_token_names_where_to_give_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DMSGW_OPERATOR_TOKEN", raising=False)
    with serving(operator_port) as address:
        assert main(["pods", "--operator", address]) == 2
    assert "answered 401" in (err := _error(capsys))
    assert "--token-file FILE or $DMSGW_OPERATOR_TOKEN" in err


def test_pods_never_prints_a_pods_terminal_escapes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMSGW_OPERATOR_TOKEN", "t0ken")
    with serving(operator_port) as address:
        assert main(["pods", "--operator", address]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "evil\\x1b[2J\\x1b]0;owned\\x07" in out


HELLO = Path(__file__).resolve().parent.parent / "docs" / "examples" / "hello.yaml"


def test_a_key_in_another_case_is_named(
    client_args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ensemble = tmp_path / "capital.yaml"
    ensemble.write_text(HELLO.read_text().replace("    executor: docker", "    Executor: docker"))
    assert main(["deploy", str(ensemble), *client_args]) == 2
    assert "allocation must have an executor (found 'Executor': the DMS reads the key " in (
        _error(capsys)
    )


@pytest.mark.parametrize("levels", [400, 500])
@pytest.mark.parametrize("style", ["flow", "block"])
def test_yaml_nested_hundreds_of_levels_is_one_line(
    client_args: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    levels: int,
    style: str,
) -> None:
    nested = (
        "[" * levels + "]" * levels
        if style == "flow"
        else "\n" + "".join("  " * (i + 2) + "- \n" for i in range(levels))
    )
    ensemble = tmp_path / "deep.yaml"
    ensemble.write_text(f'version: "V1"\nallocations:\n  a: {nested}\n')
    assert main(["deploy", str(ensemble), *client_args]) == 2
    assert "YAML error: nested more than 100 levels deep" in _error(capsys)


def test_a_missing_context_suggests_the_command_that_makes_it(
    client_args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["invoke", "/dms/node/peers/list", "--context", "nosuch", *client_args]
    assert main(argv) == 2
    assert f"create it with `dmsgw cap new nosuch --cap-dir {tmp_path / 'cap'}`" in _error(capsys)


def test_one_address_for_both_servers_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dmsgw.interlink.app as app

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the gateway started")

    monkeypatch.setattr(app, "start_backend", never)
    monkeypatch.setenv("DMSGW_OPERATOR_TOKEN", "a-token-of-the-operator-" * 2)
    argv = ["serve", "--devnet", "--listen", "127.0.0.1:23457"]
    argv += ["--operator-listen", "0.0.0.0:23457"]
    assert main(argv) == 2
    assert "(--listen) and the operator port (--operator-listen) are both" in _error(capsys)


def test_an_unknown_option_of_a_command_shows_that_commands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["invoke", "/dms/node/peers/list", "--bogus"])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: dmsgw invoke ")
    assert "dmsgw invoke: error: unrecognized arguments: --bogus" in err


def test_serve_help_names_every_operator_route(capsys: pytest.CaptureFixture[str]) -> None:
    from dmsgw.interlink.server import Health, Metrics, operator_app
    from dmsgw.interlink.server.operator_port import OPERATOR_ROUTES

    app = operator_app(Health(), Metrics(process=False))
    served = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert served == set(OPERATOR_ROUTES)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ", ".join(OPERATOR_ROUTES) in text


def test_a_start_up_error_is_one_line_without_unclosed_session_noise(tmp_path: Path) -> None:
    """A corrupt state file ends the start in one line (it is opened before the devnet starts,
    and nothing is left open behind it)."""
    (tmp_path / "corrupt.db").write_bytes(b"not a database at all" * 10)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMSGW_", "DMS_"))}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    env |= {"DMS_PASSPHRASE": "pw", "DMSGW_TEST_SCRYPT_N": "1024"}
    argv = [sys.executable, "-m", "dmsgw", "serve", "--devnet", "--listen", "127.0.0.1:0"]
    argv += ["--operator-listen", "127.0.0.1:0", "--log-format", "text"]
    argv += ["--state-path", str(tmp_path / "corrupt.db")]
    ended = subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path, timeout=120)
    err = ended.stderr.decode()
    assert ended.returncode == 2, err
    assert "dmsgw: error: cannot open the state file" in err
    assert "Unclosed" not in err and "Traceback" not in err
