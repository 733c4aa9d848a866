"""The gateway's configuration (``dmsgw serve``).

Every setting comes from, highest first: a command-line flag, an environment variable
(``DMSGW_<KEY>``), the TOML file (``--config`` or ``$DMSGW_CONFIG``; flat ``key = value``
pairs), the default. :func:`load_config` remembers where each value came from, so that a bad
value is reported as ``listen (env DMSGW_LISTEN): …`` and the operator knows what to fix.

Secrets never come from the file or a flag (a file gets committed, a flag shows in ``ps``):
the DMS key's passphrase is ``$DMS_PASSPHRASE`` (what ``nunet`` reads), the plugin API's bearer
token ``$DMSGW_TOKEN`` or the contents of ``token_file``. They are :class:`~pydantic.SecretStr`
(``**********`` in ``repr``), and :func:`~dmsgw.interlink.log_lines.configure_logging`
blanks them, bearer tokens and capability signatures out of every log line.

Relative paths in the file (``key_dir``, ``cap_dir``, ``token_file``, ``state_path``) are
relative to the file's directory; from the environment or a flag, to the working directory.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from ..behaviors.devnet_record import state_dir
from ..errors import DmsgwError
from .poll_pace import DEFAULT_POLLS_PER_S
from .server import (
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_OPERATOR_PORT,
    DEFAULT_PLUGIN_PORT,
    DEFAULT_SHUTDOWN_GRACE_S,
    MAX_DEADLINE_S,
    ListenAddress,
    ServerOptions,
)
from .server.operator_port import OPERATOR_ROUTES

__all__ = [
    "CONFIG_ENV",
    "PASSPHRASE_ENV",
    "SETTINGS",
    "TOKEN_ENV",
    "ConfigError",
    "GatewayConfig",
    "Setting",
    "default_state_path",
    "load_config",
]

CONFIG_ENV = "DMSGW_CONFIG"
TOKEN_ENV = "DMSGW_TOKEN"
PASSPHRASE_ENV = "DMS_PASSPHRASE"
DEFAULT_NAME = "dmsgw"  # the key and the capability context `dmsgw whoami` creates
DEFAULT_PODS_CAPACITY = 1000
DEFAULT_CPU_CORES = 0.5
DEFAULT_MEMORY_MIB = 512
"""What a container that requests and limits neither gets (``TranslationOptions``' defaults)."""
PRIVILEGED_PORTS = 1024


class ConfigError(DmsgwError):
    """A configuration that cannot be used; the message names each key and its source."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One key, readable from the file, ``DMSGW_<KEY>`` and a flag."""

    key: str
    flag: str
    metavar: str
    help: str

    @property
    def env(self) -> str:
        return f"DMSGW_{self.key.upper()}"


SETTINGS: tuple[Setting, ...] = (
    Setting("dms_url", "--dms-url", "URL", "DMS REST API; empty: start the embedded devnet"),
    Setting("key_name", "--key", "NAME", f"the gateway's key (default {DEFAULT_NAME})"),
    Setting("key_dir", "--key-dir", "DIR", "key directory (default ~/.nunet/key)"),
    Setting(
        "cap_context",
        "--cap-context",
        "NAME",
        f"capability context (default {DEFAULT_NAME})",
    ),
    Setting("cap_dir", "--cap-dir", "DIR", "capability context directory (default ~/.nunet/cap)"),
    Setting(
        "listen",
        "--listen",
        "ADDR",
        f"plugin API: a unix socket path or host:port (default 127.0.0.1:{DEFAULT_PLUGIN_PORT})",
    ),
    Setting(
        "operator_listen",
        "--operator-listen",
        "ADDR",
        f"{', '.join(OPERATOR_ROUTES)} (default 127.0.0.1:{DEFAULT_OPERATOR_PORT}); off "
        "loopback, all but /healthz and /readyz require the bearer token",
    ),
    Setting(
        "token_file", "--token-file", "FILE", f"file holding the bearer token (or ${TOKEN_ENV})"
    ),
    Setting(
        "state_path",
        "--state-path",
        "FILE",
        "SQLite state (default $XDG_STATE_HOME/dmsgw/gateway.sqlite3)",
    ),
    Setting(
        "pods_capacity",
        "--pods-capacity",
        "N",
        f"pods offered to Kubernetes (default {DEFAULT_PODS_CAPACITY})",
    ),
    Setting(
        "polls_per_s",
        "--polls-per-second",
        "N",
        "status polls of the DMS a second, all followed pods together: with more pods than "
        f"that in 5 s, each is polled less often (default {DEFAULT_POLLS_PER_S:g})",
    ),
    Setting(
        "gpu_resource_prefix",
        "--gpu-resource-prefix",
        "PREFIX",
        "how GPU classes are named in the node's capacity: nunet.gpu. (the NuNet design's, "
        "default) or nunet.io/gpu. (a name Kubernetes lets pods request)",
    ),
    Setting(
        "default_cpu_cores",
        "--default-cpu-cores",
        "CORES",
        "CPU a container gets that requests and limits none (default 0.5; the DMS enforces it)",
    ),
    Setting(
        "default_memory_mib",
        "--default-memory-mib",
        "MIB",
        "memory a container gets that requests and limits none, in MiB (default 512; the "
        "DMS enforces it)",
    ),
    Setting("log_level", "--log-level", "LEVEL", "DEBUG, INFO, WARNING or ERROR (default INFO)"),
    Setting("log_format", "--log-format", "FORMAT", "json (JSON lines, default) or text"),
    Setting(
        "max_body_bytes",
        "--max-body-bytes",
        "N",
        f"largest request body (default {DEFAULT_MAX_BODY_BYTES})",
    ),
    Setting(
        "deadline_s",
        "--deadline",
        "SECONDS",
        f"answer 503 when a backend call takes longer (default {DEFAULT_DEADLINE_S:g})",
    ),
    Setting(
        "shutdown_grace_s",
        "--shutdown-grace",
        "SECONDS",
        f"time in-flight requests get on SIGTERM (default {DEFAULT_SHUTDOWN_GRACE_S:g})",
    ),
)
_BY_KEY = {setting.key: setting for setting in SETTINGS}
_FILE_PATH_KEYS = frozenset({"key_dir", "cap_dir", "token_file", "state_path"})
_SECRETS_IN_FILE = {
    "token": f"set ${TOKEN_ENV} or token_file",
    "passphrase": f"set ${PASSPHRASE_ENV}",
}


def default_state_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/dmsgw/gateway.sqlite3``, else ``~/.local/state/dmsgw/…``."""
    return state_dir(env) / "gateway.sqlite3"


def _listen_validator(default_port: int) -> PlainValidator:
    def parse(value: object) -> ListenAddress:
        if isinstance(value, ListenAddress):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ValueError("expected a unix socket path or host:port")
        if value.strip().isdigit() and 0 < int(value) < PRIVILEGED_PORTS:
            raise ValueError(
                f"{value.strip()}: a bare number is a port on loopback, and this one is "
                f"privileged (below {PRIVILEGED_PORTS}), likely a typo; write the port, e.g. "
                f"{default_port}, or 127.0.0.1:{value.strip()} if you mean it"
            )
        return ListenAddress.parse(value, default_port=default_port)

    return PlainValidator(parse)


_Listen = Annotated[
    ListenAddress, _listen_validator(DEFAULT_PLUGIN_PORT), PlainSerializer(str, return_type=str)
]
_OperatorListen = Annotated[
    ListenAddress, _listen_validator(DEFAULT_OPERATOR_PORT), PlainSerializer(str, return_type=str)
]
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+")


class GatewayConfig(BaseModel):
    """Everything ``dmsgw serve`` needs; see :data:`SETTINGS` for the keys' meaning."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dms_url: str | None = None
    key_name: str = DEFAULT_NAME
    key_dir: Path = Field(default_factory=lambda: Path("~/.nunet/key").expanduser())
    cap_context: str = DEFAULT_NAME
    cap_dir: Path = Field(default_factory=lambda: Path("~/.nunet/cap").expanduser())
    passphrase: SecretStr | None = None
    listen: _Listen = ListenAddress()
    operator_listen: _OperatorListen = ListenAddress(port=DEFAULT_OPERATOR_PORT)
    token: SecretStr | None = None
    token_file: Path | None = None
    state_path: Path = Field(default_factory=default_state_path)
    pods_capacity: int = Field(default=DEFAULT_PODS_CAPACITY, ge=1, le=1_000_000)
    polls_per_s: float = Field(default=DEFAULT_POLLS_PER_S, gt=0, le=1_000_000)
    gpu_resource_prefix: Literal["nunet.gpu.", "nunet.io/gpu."] = "nunet.gpu."
    default_cpu_cores: float = Field(default=DEFAULT_CPU_CORES, gt=0, le=4096)
    default_memory_mib: int = Field(default=DEFAULT_MEMORY_MIB, ge=4, le=1 << 30)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=1 << 30)
    deadline_s: float = Field(default=DEFAULT_DEADLINE_S, gt=0, le=MAX_DEADLINE_S)
    shutdown_grace_s: float = Field(default=DEFAULT_SHUTDOWN_GRACE_S, ge=0, le=3600)
    # Where each value came from ("env DMSGW_LISTEN"…), for messages and the start-up log.
    sources: dict[str, str] = Field(default_factory=dict, repr=False, exclude=True)

    @field_validator("dms_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        try:
            parts = urlsplit(value)
            valid = parts.scheme in ("http", "https") and bool(parts.hostname)
            _ = parts.port  # raises ValueError on a bad port
        except ValueError:
            valid = False
        if not valid or any(c.isspace() for c in value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("key_name", "cap_context")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", value):
            raise ValueError(f"{value!r}: use 1-100 letters, digits, '.', '_' or '-'")
        return value

    @field_validator("key_dir", "cap_dir", "state_path", "token_file")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("token")
    @classmethod
    def _header_safe(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _HEADER_TOKEN.fullmatch(value.get_secret_value()):
            raise ValueError("a bearer token is printable ASCII without spaces")
        return value

    @model_validator(mode="after")
    def _token_off_loopback(self, info: ValidationInfo) -> GatewayConfig:
        """Off loopback, anyone on the network can connect: the plugin API (which runs
        commands) and the operator port's ``/metrics`` then need the bearer token."""
        if self.token is not None:
            return self
        for key, address, guarded in (
            ("listen", self.listen, "the plugin API"),
            ("operator_listen", self.operator_listen, "/metrics"),
        ):
            if not address.is_loopback:
                raise ValueError(
                    f"{key} ({_source(info, key)}) = {address} is not loopback, so {guarded} "
                    f"needs a bearer token: set ${TOKEN_ENV} or token_file, or listen on a "
                    "unix socket or 127.0.0.1"
                )
        return self

    @property
    def embedded_devnet(self) -> bool:
        """No DMS URL: the gateway starts the embedded devnet and talks to it."""
        return self.dms_url is None

    def server_options(self) -> ServerOptions:
        return ServerOptions(
            listen=self.listen,
            operator_listen=self.operator_listen,
            token=self.token.get_secret_value() if self.token is not None else None,
            max_body_bytes=self.max_body_bytes,
            deadline_s=self.deadline_s,
            shutdown_grace_s=self.shutdown_grace_s,
        )

    def secret_values(self) -> list[str]:
        """What :class:`~dmsgw.interlink.log_lines.Redactor` must blank out wherever it
        appears."""
        return [s.get_secret_value() for s in (self.token, self.passphrase) if s is not None]

    def describe(self) -> dict[str, str]:
        """Each setting with its source, secrets shown only as set or not: the start-up log."""
        shown = self.model_dump(mode="json", exclude={"passphrase", "token"})
        described = {
            key: f"{'unset' if value is None else value} ({self.sources.get(key, 'default')})"
            for key, value in shown.items()
        }
        described["token"] = "set" if self.token is not None else "not set"
        described["passphrase"] = "set" if self.passphrase is not None else "not set"
        return described


def _source(info: ValidationInfo, key: str) -> str:
    context = info.context if isinstance(info.context, dict) else {}
    sources = context.get("sources", {})
    return str(sources.get(key, "default"))


# --- loading -------------------------------------------------------------------------------


def load_config(
    *,
    config_file: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> GatewayConfig:
    """The configuration from ``flags`` (keys of :data:`SETTINGS`; ``None`` means not given),
    then ``env``, then the TOML file (``config_file``, else ``$DMSGW_CONFIG``), then defaults."""
    env = os.environ if env is None else env
    values: dict[str, object] = {"state_path": default_state_path(env)}
    sources: dict[str, str] = {}
    file_source = "flag --config" if config_file else f"env {CONFIG_ENV}"
    chosen = config_file or env.get(CONFIG_ENV)
    if chosen:
        path = Path(chosen).expanduser()
        for key, value in _read_file(path, file_source).items():
            values[key], sources[key] = value, f"file {path}"
    for setting in SETTINGS:
        if setting.env in env:
            values[setting.key], sources[setting.key] = env[setting.env], f"env {setting.env}"
    for key, value in (flags or {}).items():
        if value is not None:
            values[key], sources[key] = value, f"flag {_BY_KEY[key].flag}"
    _add_secrets(values, sources, env)
    try:
        return GatewayConfig.model_validate(
            {**values, "sources": sources}, context={"sources": sources}
        )
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from None


def _read_file(path: Path, source: str) -> dict[str, object]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} ({source}): not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} ({source}): {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} ({source}): not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} ({source}): not TOML: {exc}") from None
    problems = [_refuse_key(key, path) for key in data if key not in _BY_KEY]
    if problems:
        raise ConfigError("; ".join(problems))
    return {
        key: _relative_to(path.parent, value) if key in _FILE_PATH_KEYS else value
        for key, value in data.items()
    }


def _refuse_key(key: str, path: Path) -> str:
    if key in _SECRETS_IN_FILE:
        return (
            f"{key} (file {path}): secrets are not read from the config file; "
            + (_SECRETS_IN_FILE[key])
        )
    close = difflib.get_close_matches(key, list(_BY_KEY), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(_BY_KEY)}"
    return f"{key} (file {path}): unknown key; {hint}"


def _relative_to(base: Path, value: object) -> object:
    if not isinstance(value, str):
        return value
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _add_secrets(
    values: dict[str, object], sources: dict[str, str], env: Mapping[str, str]
) -> None:
    """The passphrase and the token: from the environment, or the token from ``token_file``."""
    if env.get(PASSPHRASE_ENV):
        values["passphrase"], sources["passphrase"] = env[PASSPHRASE_ENV], f"env {PASSPHRASE_ENV}"
    token_file = values.get("token_file")
    if env.get(TOKEN_ENV) and token_file:
        raise ConfigError(
            f"token: both ${TOKEN_ENV} and token_file ({sources['token_file']}) are set; keep one"
        )
    if env.get(TOKEN_ENV):
        values["token"], sources["token"] = env[TOKEN_ENV], f"env {TOKEN_ENV}"
    elif isinstance(token_file, str | Path) and token_file:
        values["token"] = _read_token(Path(token_file).expanduser(), sources["token_file"])
        sources["token"] = f"token_file {token_file}"


def _read_token(path: Path, source: str) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"token_file ({source}): cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"token_file ({source}): {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"token_file ({source}): {path} is empty")
    return token


_SECRET_KEYS = frozenset({"token", "passphrase"})


def _describe(exc: ValidationError, sources: Mapping[str, str]) -> str:
    """``key (source): problem; …``; never shows a secret's value."""
    problems = []
    for error in exc.errors(include_url=False):
        if not error["loc"]:  # a check across keys names them itself
            problems.append(_reason(error))
            continue
        key = str(error["loc"][0])
        shown = "" if key in _SECRET_KEYS else _got(error)
        problems.append(f"{key} ({sources.get(key, 'default')}): {_reason(error)}{shown}")
    return "; ".join(problems)


def _reason(error: ErrorDetails) -> str:
    if error["type"] == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _got(error: ErrorDetails) -> str:
    if error["type"] == "value_error" or isinstance(error["input"], dict):
        return ""
    return f" (got {error['input']!r})"
