"""``dmsgw serve``'s configuration: precedence, messages naming key and source, secrets."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from pydantic import ValidationError

from dmsgw.interlink.configuration.serve_config import (
    SETTINGS,
    ConfigError,
    GatewayConfig,
    load_config,
)
from dmsgw.interlink.gateway_log import configure_logging
from dmsgw.interlink.server import ListenAddress

TOKEN = "tok-5f1e0c9a7b3d"
OTHER = "op-77c1d2e3f4a5"
PASSPHRASE = "correct horse battery staple"
DMS = {"DMSGW_DMS_URL": "http://127.0.0.1:9999"}
SIG = "9xAr/p3dx5G6Dc+VGsvmuTJnGymCr68Ni+zQDZOs+6nNS+GEPNBHhRI1wv3y7wnfE59yjqFRPgbxVkXSF9q9AA=="


def write(tmp_path: Path, text: str, name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(**kwargs: object) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(**kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- sources and precedence ----------------------------------------------------------------


def test_defaults() -> None:
    config = load_config(env={**DMS, "XDG_STATE_HOME": "/var/state"})
    assert config.listen.path == Path("~/.interlink/.plugin.sock").expanduser()  # interLink's
    assert str(config.operator_listen) == "127.0.0.1:4001"
    assert not config.embedded_devnet and config.dms_url == "http://127.0.0.1:9999"
    assert (config.key_name, config.cap_context) == ("dmsgw", "dmsgw")
    assert config.key_dir == Path("~/.nunet/key").expanduser()
    assert config.state_path == Path("/var/state/dmsgw/gateway.sqlite3")
    assert (config.token, config.operator_token, config.passphrase) == (None, None, None)
    assert (config.log_level, config.log_format) == ("INFO", "json")
    assert config.dms_log_dir is None
    assert config.sources == {"dms_url": "env DMSGW_DMS_URL"}


def test_the_devnet_and_a_real_dms_have_their_own_default_state() -> None:
    devnet = load_config(env={"DMSGW_DEVNET": "1", "XDG_STATE_HOME": "/var/state"})
    assert devnet.embedded_devnet and devnet.dms_url is None
    assert devnet.state_path == Path("/var/state/dmsgw/devnet.sqlite3")
    chosen = load_config(env={"DMSGW_DEVNET": "true", "DMSGW_STATE_PATH": "/srv/demo.sqlite3"})
    assert chosen.state_path == Path("/srv/demo.sqlite3")


def test_without_a_dms_nothing_starts_and_both_ways_are_named() -> None:
    """A typo in one variable must not turn a production gateway into a local executor."""
    for env in ({}, {"DMSGW_DMS_URL": ""}, {"DMSGW_DMS_ULR": "http://dms:9999"}):
        assert error_of(env=env) == (
            "no DMS chosen: set dms_url (--dms-url, $DMSGW_DMS_URL or dms_url: in the --config "
            "file) to a DMS's REST API, or pass --devnet ($DMSGW_DEVNET=1, devnet: true) to run "
            "pods on this host's embedded devnet"
        )
    assert error_of(env={"DMSGW_DEVNET": "0"}).startswith("no DMS chosen")
    assert error_of(env={"DMSGW_DEVNET": "", "DMSGW_LISTEN": ""}).startswith("no DMS chosen")
    assert error_of(env={**DMS}, flags={"devnet": True}) == (
        "devnet (flag --devnet) and dms_url (env DMSGW_DMS_URL) are both set: the gateway "
        "talks to one DMS; keep one"
    )
    assert error_of(env={"DMSGW_DEVNET": "maybe"}) == (
        "devnet (env DMSGW_DEVNET): input should be a valid boolean, unable to interpret input "
        "(got 'maybe')"
    )


def test_state_path_without_xdg() -> None:
    expected = Path("~/.local/state/dmsgw/gateway.sqlite3").expanduser()
    assert load_config(env=DMS).state_path == expected
    assert load_config(env={**DMS, "XDG_STATE_HOME": "relative"}).state_path == expected


def test_flags_win_over_env_which_wins_over_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'listen: "127.0.0.1:5000"\npods_capacity: 10\nlog_format: "text"\n'
        'dms_url: "http://dms.example:9999/"\n',
    )
    env = {"DMSGW_LISTEN": "127.0.0.1:6000", "DMSGW_LOG_FORMAT": "json", "DMSGW_LOG_LEVEL": "debug"}
    config = load_config(
        config_file=path, env=env, flags={"listen": "127.0.0.1:7000", "log_level": None}
    )
    assert str(config.listen) == "127.0.0.1:7000"
    assert config.log_format == "json"
    assert config.log_level == "DEBUG"
    assert config.pods_capacity == 10
    assert config.dms_url == "http://dms.example:9999"
    assert config.sources == {
        "listen": "flag --listen",
        "log_format": "env DMSGW_LOG_FORMAT",
        "log_level": "env DMSGW_LOG_LEVEL",
        "pods_capacity": f"file {path}:2",
        "dms_url": f"file {path}:4",
    }
    assert config.describe()["listen"] == "127.0.0.1:7000 (flag --listen)"


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "pods_capacity: 42\n")
    assert load_config(env={**DMS, "DMSGW_CONFIG": str(path)}).pods_capacity == 42


def test_relative_paths_in_the_file_are_relative_to_it(tmp_path: Path) -> None:
    path = write(tmp_path, 'state_path: "state/gw.sqlite3"\nkey_dir: "/abs/keys"\n')
    config = load_config(config_file=path, env={**DMS, "DMSGW_CAP_DIR": "caps"})
    assert config.state_path == tmp_path / "state" / "gw.sqlite3"
    assert config.key_dir == Path("/abs/keys")
    assert config.cap_dir == Path("caps")


def test_empty_values_in_the_file_keep_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, "dms_url:\nlisten: ''\ndevnet: yes\nstate_path: ~\n")
    config = load_config(config_file=path, env={})
    assert config.embedded_devnet and config.dms_url is None
    assert config.sources == {"devnet": f"file {path}:3"}


def test_every_setting_is_in_the_reference_with_its_flag_and_variable() -> None:
    reference = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    lines = [line for line in reference.splitlines() if line.startswith("| `")]
    rows = {line.split("|")[1].strip(" `"): line for line in lines}
    for setting in SETTINGS:
        assert setting.key in rows, f"{setting.key} is not in docs/configuration.md"
        assert f"`{setting.flag}`" in rows[setting.key] and setting.env in rows[setting.key]


def test_every_setting_has_an_env_and_a_flag() -> None:
    fields = set(GatewayConfig.model_fields)
    for setting in SETTINGS:
        assert setting.key in fields
        assert setting.env == f"DMSGW_{setting.key.upper()}"
        assert setting.flag.startswith("--")


# --- listen addresses ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("unix:///run/dmsgw/plugin.sock", ListenAddress(path=Path("/run/dmsgw/plugin.sock"))),
        ("/run/dmsgw/plugin.sock", ListenAddress(path=Path("/run/dmsgw/plugin.sock"))),
        ("127.0.0.1:4100", ListenAddress(port=4100)),
        ("4100", ListenAddress(port=4100)),
        ("[::1]:4100", ListenAddress(host="::1", port=4100)),
    ],
)
def test_listen_is_a_unix_socket_or_host_port(value: str, expected: ListenAddress) -> None:
    assert load_config(env={**DMS, "DMSGW_LISTEN": value}).listen == expected


def test_a_listen_port_from_toml_may_be_a_number(tmp_path: Path) -> None:
    config = load_config(config_file=write(tmp_path, "operator_listen: 9100\n"), env=DMS)
    assert str(config.operator_listen) == "127.0.0.1:9100"


def test_a_bare_privileged_port_is_named_as_a_likely_typo(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: 5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config_file=path, env=DMS)
    assert str(caught.value) == (
        f"listen (file {path}:1): 5: a bare number is a port on loopback, and this one is "
        "privileged (below 1024), likely a typo; write the port, e.g. 4000, or 127.0.0.1:5 if "
        "you mean it"
    )
    assert str(load_config(env={**DMS, "DMSGW_LISTEN": "127.0.0.1:5"}).listen) == "127.0.0.1:5"


def test_operator_host_alone_gets_the_operator_port() -> None:
    config = load_config(
        env={**DMS, "DMSGW_OPERATOR_LISTEN": "0.0.0.0", "DMSGW_OPERATOR_TOKEN": TOKEN}
    )
    assert str(config.operator_listen) == "0.0.0.0:4001"


def test_an_operator_port_off_loopback_needs_the_operator_token_for_metrics() -> None:
    """The operator port tells the gateway's state (pods, errors): off loopback, /metrics
    is the operator token's; the probes stay open (issue 10, defect 1)."""
    message = error_of(env=DMS, flags={"operator_listen": "0.0.0.0:4001"})
    assert message == (
        "operator_listen (flag --operator-listen) = 0.0.0.0:4001 is not loopback, so /metrics "
        "needs a bearer token: set $DMSGW_OPERATOR_TOKEN or operator_token_file, or listen on "
        "127.0.0.1"
    )
    # the plugin API's token is not the operator port's (issue 29): it says so
    assert error_of(
        env={**DMS, "DMSGW_OPERATOR_LISTEN": "0.0.0.0:4001", "DMSGW_TOKEN": TOKEN}
    ).endswith(
        "operator_token_file ($DMSGW_TOKEN is the plugin API's alone), or listen on 127.0.0.1"
    )
    options = load_config(
        env={**DMS, "DMSGW_OPERATOR_LISTEN": "0.0.0.0:4001", "DMSGW_OPERATOR_TOKEN": OTHER}
    ).server_options()
    assert (options.metrics_token, options.plugin_token) == (OTHER, None)
    assert (
        load_config(env={**DMS, "DMSGW_OPERATOR_TOKEN": OTHER}).server_options().metrics_token
        is None
    )


def test_the_plugin_api_on_a_unix_socket_never_requires_a_token(tmp_path: Path) -> None:
    """interLink sends no credential to its plugin: a token set for TCP (or by mistake) must
    not make the socket answer 401 (issue 29)."""
    sock = f"unix://{tmp_path}/plugin.sock"
    env = {**DMS, "DMSGW_LISTEN": sock, "DMSGW_TOKEN": TOKEN, "DMSGW_OPERATOR_TOKEN": OTHER}
    config = load_config(env={**env, "DMSGW_OPERATOR_LISTEN": "0.0.0.0:4001"})
    options = config.server_options()
    assert (options.plugin_token, options.metrics_token) == (None, OTHER)
    assert config.describe()["token"] == "set, unused: the plugin API is on a unix socket"
    on_tcp = load_config(env={**env, "DMSGW_LISTEN": "0.0.0.0:4000"}).server_options()
    assert (on_tcp.plugin_token, on_tcp.metrics_token) == (TOKEN, None)


def test_non_loopback_without_a_token_is_refused() -> None:
    message = error_of(env={**DMS, "DMSGW_LISTEN": "0.0.0.0:4000"})
    assert message.startswith(
        "listen (env DMSGW_LISTEN) = 0.0.0.0:4000 is not loopback, so the plugin API needs a "
        "bearer token: set $DMSGW_TOKEN or token_file"
    )
    config = load_config(env={**DMS, "DMSGW_LISTEN": "0.0.0.0:4000", "DMSGW_TOKEN": TOKEN})
    assert config.server_options().token == TOKEN


# --- validation messages -------------------------------------------------------------------


def test_errors_name_each_key_and_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, 'pods_capacity: 0\nlog_format: "xml"\n')
    message = error_of(
        config_file=path,
        env={**DMS, "DMSGW_LISTEN": ":4000", "DMSGW_MAX_BODY_BYTES": "lots"},
        flags={"deadline_s": "200"},
    )
    assert message.split("; ") == [
        "listen (env DMSGW_LISTEN): ':4000': give a host (0.0.0.0 for every interface)",
        f"pods_capacity (file {path}:1): input should be greater than or equal to 1 (got 0)",
        f"log_format (file {path}:2): input should be 'json' or 'text' (got 'xml')",
        "max_body_bytes (env DMSGW_MAX_BODY_BYTES): input should be a valid integer, unable to "
        "parse string as an integer (got 'lots')",
        "deadline_s (flag --deadline): input should be less than or equal to 110 (got '200')",
    ]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("0", "input should be greater than 0 (got '0')"),
        ("-5", "input should be greater than 0 (got '-5')"),
        ("fast", "input should be a valid number, unable to parse string as a number (got 'fast')"),
        ("nan", "input should be less than or equal to 1000000 (got 'nan')"),
        ("inf", "input should be less than or equal to 1000000 (got 'inf')"),
    ],
)
def test_polls_a_second_must_be_a_positive_number(given: str, said: str) -> None:
    assert load_config(env={**DMS, "DMSGW_POLLS_PER_S": "250"}).polls_per_s == 250.0
    assert error_of(env={**DMS, "DMSGW_POLLS_PER_S": given}) == (
        f"polls_per_s (env DMSGW_POLLS_PER_S): {said}"
    )


def test_bad_urls_and_names() -> None:
    message = error_of(env={**DMS, "DMSGW_DMS_URL": "dms:9999", "DMSGW_KEY_NAME": "../etc"})
    assert "dms_url (env DMSGW_DMS_URL): 'dms:9999' is not an http:// or https:// URL" in message
    assert "key_name (env DMSGW_KEY_NAME): '../etc': use 1-100 letters" in message


def test_unknown_keys_in_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'listn: "127.0.0.1:4000"\ncolour: "blue"\n')
    message = error_of(config_file=path, env=DMS)
    assert message.startswith(
        f"listn (file {path}:1): unknown key; did you mean 'listen'?; colour (file {path}:2): "
        "unknown key; known keys: dms_url, devnet, key_name"
    )


@pytest.mark.parametrize("key", ["token", "operator_token", "passphrase"])
def test_secrets_are_refused_in_the_file(tmp_path: Path, key: str) -> None:
    path = write(tmp_path, f'{key}: "{TOKEN}"\n')
    message = error_of(config_file=path, env=DMS)
    assert message.startswith(f"{key} (file {path}:1): secrets are not read from the config file")
    assert TOKEN not in message


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert error_of(config_file=missing, env=DMS) == (
        f"config file {missing} (flag --config): not found"
    )
    env = {**DMS, "DMSGW_CONFIG": str(missing)}
    assert error_of(env=env).endswith("(env DMSGW_CONFIG): not found")
    broken = write(tmp_path, "listen: [\n")
    assert error_of(config_file=broken, env=DMS) == (
        f"config file {broken} (flag --config): not YAML: expected the node content, but "
        "found '<stream end>' (line 2, column 1)"
    )
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"listen: \xff\n")
    assert error_of(config_file=binary, env=DMS).endswith("(flag --config): not UTF-8")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            'listen = "127.0.0.1:4000"\n',
            "a single value (the configuration is YAML: write key: value, not key = value)",
        ),
        ("- listen\n- 127.0.0.1:4000\n", "a list"),
    ],
)
def test_a_file_that_is_not_one_mapping(tmp_path: Path, text: str, said: str) -> None:
    path = write(tmp_path, text)
    assert error_of(config_file=path, env=DMS) == (
        f"config file {path} (flag --config): expected one 'key: value' per line (a YAML "
        f"mapping), got {said}"
    )


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "pods_capacity: 10\nlog_level: INFO\npods_capacity: 20\n")
    assert error_of(config_file=path, env=DMS) == (
        f"pods_capacity (file {path}:3): given twice (first on line 1); keep one"
    )


def test_wrong_types_in_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "pods_capacity: [1, 2]\nlisten: {host: x}\nlog_level: off\n")
    assert error_of(config_file=path, env=DMS).split("; ") == [
        f"listen (file {path}:2): expected a unix socket path or host:port",
        f"pods_capacity (file {path}:1): input should be a valid integer (got [1, 2])",
        f"log_level (file {path}:3): input should be 'DEBUG', 'INFO', 'WARNING' or 'ERROR' "
        "(got False)",
    ]


def test_frozen() -> None:
    config = load_config(env=DMS)
    with pytest.raises(ValidationError):
        config.pods_capacity = 5  # type: ignore[misc]


# --- secrets -------------------------------------------------------------------------------


def test_token_from_a_file(tmp_path: Path) -> None:
    write(tmp_path, f"{TOKEN}\n", name="token")
    path = write(tmp_path, 'token_file: "token"\n')
    config = load_config(config_file=path, env=DMS)
    assert config.token is not None and config.token.get_secret_value() == TOKEN
    assert config.sources["token"] == f"token_file {tmp_path / 'token'}"


def test_token_problems(tmp_path: Path) -> None:
    empty = write(tmp_path, "\n", name="empty")
    assert error_of(env=DMS, flags={"token_file": str(empty)}) == (
        f"token_file (flag --token-file): {empty} is empty"
    )
    missing = tmp_path / "nope"
    assert error_of(env={**DMS, "DMSGW_TOKEN_FILE": str(missing)}) == (
        f"token_file (env DMSGW_TOKEN_FILE): cannot read {missing}: No such file or directory"
    )
    both = error_of(env={**DMS, "DMSGW_TOKEN": TOKEN, "DMSGW_TOKEN_FILE": str(empty)})
    assert both.startswith("token: both $DMSGW_TOKEN and token_file (env DMSGW_TOKEN_FILE)")
    spaced = error_of(env={**DMS, "DMSGW_TOKEN": "two words"})
    assert spaced == "token (env DMSGW_TOKEN): a bearer token is printable ASCII without spaces"


def test_secrets_are_not_in_repr_str_or_describe() -> None:
    env = {**DMS, "DMSGW_TOKEN": TOKEN, "DMS_PASSPHRASE": PASSPHRASE, "DMSGW_LISTEN": "127.0.0.1:0"}
    config = load_config(env=env)
    assert config.passphrase is not None
    assert config.passphrase.get_secret_value() == PASSPHRASE
    described = config.describe()
    assert (described["token"], described["passphrase"]) == ("set", "set")
    for text in (repr(config), str(config), json.dumps(described)):
        assert TOKEN not in text and PASSPHRASE not in text


@pytest.fixture
def captured_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)


def _log_secrets(logger: logging.Logger) -> None:
    token_list = json.dumps({"tok": [{"dms": {"act": "delegate", "sig": SIG}}]})
    logger.info("got header Authorization: Bearer %s", "abc.def-ghi")
    logger.info("anchor %s", token_list)
    logger.info("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl here")
    logger.warning("unlock", extra={"passphrase": "whatever-it-is", "token": "other-secret"})
    logger.info("config", extra={"config": {"note": f"token is {TOKEN}"}})
    try:
        raise RuntimeError(f"bad passphrase {PASSPHRASE}")
    except RuntimeError:
        logger.exception("failed")


def test_json_log_lines_redact_secrets(captured_log: io.StringIO) -> None:
    configure_logging("INFO", "json", secrets=[TOKEN, PASSPHRASE], stream=captured_log)
    configure_logging("INFO", "json", secrets=[TOKEN, PASSPHRASE], stream=captured_log)
    _log_secrets(logging.getLogger("dmsgw.test"))
    output = captured_log.getvalue()
    for secret in (TOKEN, PASSPHRASE, SIG, "abc.def-ghi", "c2lnbmF0dXJl", "whatever-it-is"):
        assert secret not in output
    entries = [json.loads(line) for line in output.splitlines()]
    assert len(entries) == 6  # configured twice, still one handler
    first = entries[0]
    assert first["level"] == "INFO" and first["logger"] == "dmsgw.test"
    assert first["message"] == "got header Authorization: Bearer [REDACTED]"
    assert first["time"].endswith("Z")
    assert entries[3]["passphrase"] == entries[3]["token"] == "[REDACTED]"
    assert "[REDACTED]" in entries[1]["message"]
    assert entries[5]["exception"].startswith("Traceback")


def test_text_log_redacts_secrets(captured_log: io.StringIO) -> None:
    configure_logging("INFO", "text", secrets=[TOKEN, PASSPHRASE], stream=captured_log)
    _log_secrets(logging.getLogger("dmsgw.test"))
    output = captured_log.getvalue()
    for secret in (TOKEN, PASSPHRASE, SIG, "abc.def-ghi", "whatever-it-is"):
        assert secret not in output
    assert " INFO dmsgw.test: got header Authorization: Bearer [REDACTED]\n" in output
    assert "passphrase=[REDACTED] token=[REDACTED]" in output


def test_the_gpu_resource_prefix_is_one_of_two_spellings() -> None:
    assert load_config(env=DMS).gpu_resource_prefix == "nunet.gpu."
    chosen = load_config(env={**DMS, "DMSGW_GPU_RESOURCE_PREFIX": "nunet.io/gpu."})
    assert chosen.gpu_resource_prefix == "nunet.io/gpu."
    message = error_of(env={**DMS, "DMSGW_GPU_RESOURCE_PREFIX": "gpu"})
    assert message == (
        "gpu_resource_prefix (env DMSGW_GPU_RESOURCE_PREFIX): input should be 'nunet.gpu.' or "
        "'nunet.io/gpu.' (got 'gpu')"
    )


async def test_a_malformed_http_request_is_one_warning_not_a_traceback(
    captured_log: io.StringIO,
) -> None:
    """aiohttp logged a client's over-long request line at ERROR with a traceback, as if the
    gateway had failed, though it answered 400: a hostile client could fill the log with them."""
    configure_logging("INFO", "text", stream=captured_log)
    runner = web.AppRunner(web.Application(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /pods/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
    finally:
        await runner.cleanup()
    assert answer.split(b"\r\n")[0].endswith(b" 400 Bad Request")
    output = captured_log.getvalue()
    assert "Traceback" not in output and " ERROR " not in output
    warning = " WARNING aiohttp.server: malformed HTTP request from 127.0.0.1 refused (400): "
    assert warning in output
    assert "Got more than 8190 bytes" in output
