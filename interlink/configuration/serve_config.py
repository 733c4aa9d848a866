"""The gateway's configuration (``dmsgw serve``); docs/configuration.md is its reference.

Every setting comes from, highest first: a command-line flag, an environment variable
(``DMSGW_<KEY>``), the YAML file (``--config`` or ``$DMSGW_CONFIG``; one ``key: value`` a
line, :mod:`.config_file`), the default. :func:`load_config` remembers where each value came
from, so that a bad value is reported as ``listen (env DMSGW_LISTEN): …`` and the operator
knows what to fix.

Which DMS is never a default (design principle 11): ``dms_url`` names a real one, ``devnet``
asks for the embedded devnet, and a configuration with neither (or both) is refused.

Secrets never come from the file or a flag (a file gets committed, a flag shows in ``ps``):
the DMS key's passphrase is ``$DMS_PASSPHRASE`` (what ``nunet`` reads); the plugin API's bearer
token is ``$DMSGW_TOKEN`` or the contents of ``token_file``, the operator port's
``$DMSGW_OPERATOR_TOKEN`` or ``operator_token_file`` — two credentials, as the two ports have
different clients. They are :class:`~pydantic.SecretStr` (``**********`` in ``repr``), and
:func:`~dmsgw.interlink.gateway_log.configure_logging` blanks them, bearer tokens and capability
signatures out of every log line.

Relative paths in the file (``key_dir``, ``cap_dir``, the token files, ``state_path``,
``dms_log_dir``) are relative to the file's directory; from the environment or a flag, to the
working directory.
"""

from __future__ import annotations

import difflib
import os
import re
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
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from ...devnet_files.devnet_record import state_dir
from ...errors import DmsgwError
from ..capacity.admission import DEFAULT_MAX_DEPLOYING
from ..pods.poll_pace import DEFAULT_POLLS_PER_S
from ..server import (
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_OPERATOR_PORT,
    DEFAULT_PLUGIN_PORT,
    DEFAULT_SHUTDOWN_GRACE_S,
    MAX_DEADLINE_S,
    ListenAddress,
    ServerOptions,
    default_plugin_listen,
)
from .config_file import ConfigFileError, read_config_file
from .settings import (
    CONFIG_ENV,
    DEFAULT_CPU_CORES,
    DEFAULT_MEMORY_MIB,
    DEFAULT_NAME,
    DEFAULT_PODS_CAPACITY,
    OPERATOR_TOKEN_ENV,
    PASSPHRASE_ENV,
    PRIVILEGED_PORTS,
    SETTINGS,
    TOKEN_ENV,
    Setting,
)

__all__ = [
    "CONFIG_ENV",
    "OPERATOR_TOKEN_ENV",
    "PASSPHRASE_ENV",
    "SETTINGS",
    "TOKEN_ENV",
    "ConfigError",
    "GatewayConfig",
    "Setting",
    "default_state_path",
    "load_config",
]


class ConfigError(DmsgwError):
    """A configuration that cannot be used; the message names each key and its source."""


_BY_KEY = {setting.key: setting for setting in SETTINGS}
_FILE_PATH_KEYS = frozenset(
    {"key_dir", "cap_dir", "token_file", "operator_token_file", "state_path", "dms_log_dir"}
)
_SECRETS_IN_FILE = {
    "token": f"set ${TOKEN_ENV} or token_file",
    "operator_token": f"set ${OPERATOR_TOKEN_ENV} or operator_token_file",
    "passphrase": f"set ${PASSPHRASE_ENV}",
}
_NO_DMS = (
    "no DMS chosen: set dms_url (--dms-url, $DMSGW_DMS_URL or dms_url: in the --config file) "
    "to a DMS's REST API, or pass --devnet ($DMSGW_DEVNET=1, devnet: true) to run pods on "
    "this host's embedded devnet"
)


def default_state_path(env: Mapping[str, str] | None = None, *, devnet: bool = False) -> Path:
    """``$XDG_STATE_HOME/dmsgw/gateway.sqlite3`` (``devnet.sqlite3`` for the embedded
    devnet: a demo's pods never share a file with a real DMS's), else under
    ``~/.local/state/dmsgw/``."""
    return state_dir(env) / ("devnet.sqlite3" if devnet else "gateway.sqlite3")


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
_SECRET_KEYS = frozenset({"token", "operator_token", "passphrase"})


class GatewayConfig(BaseModel):
    """Everything ``dmsgw serve`` needs; see :data:`SETTINGS` for the keys' meaning."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dms_url: str | None = None
    devnet: bool = False
    key_name: str = DEFAULT_NAME
    key_dir: Path = Field(default_factory=lambda: Path("~/.nunet/key").expanduser())
    cap_context: str = DEFAULT_NAME
    cap_dir: Path = Field(default_factory=lambda: Path("~/.nunet/cap").expanduser())
    passphrase: SecretStr | None = None
    listen: _Listen = Field(default_factory=default_plugin_listen)
    operator_listen: _OperatorListen = ListenAddress(port=DEFAULT_OPERATOR_PORT)
    token: SecretStr | None = None
    token_file: Path | None = None
    operator_token: SecretStr | None = None
    operator_token_file: Path | None = None
    state_path: Path = Field(default_factory=default_state_path)
    dms_log_dir: Path | None = None
    pods_capacity: int = Field(default=DEFAULT_PODS_CAPACITY, ge=1, le=1_000_000)
    polls_per_s: float = Field(default=DEFAULT_POLLS_PER_S, gt=0, le=1_000_000)
    max_deploying: int = Field(default=DEFAULT_MAX_DEPLOYING, ge=1, le=1_000_000)
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

    @model_validator(mode="before")
    @classmethod
    def _state_path_by_dms(cls, data: object, info: ValidationInfo) -> object:
        """The default state file depends on the choice of DMS: the devnet's is its own."""
        if not isinstance(data, dict) or data.get("state_path") is not None:
            return data
        try:
            devnet = TypeAdapter(bool).validate_python(data.get("devnet", False))
        except ValidationError:
            return data  # the field's own check reports it
        context = info.context if isinstance(info.context, dict) else {}
        return {**data, "state_path": default_state_path(context.get("env"), devnet=devnet)}

    @field_validator(
        "key_dir", "cap_dir", "state_path", "token_file", "operator_token_file", "dms_log_dir"
    )
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("dms_log_dir")
    @classmethod
    def _readable_directory(cls, value: Path | None) -> Path | None:
        """Found unreadable at start, not at the first ``/getLogs`` hours later."""
        if value is None:
            return None
        try:
            with os.scandir(value):
                pass
        except OSError as exc:
            raise ValueError(
                f"{value} cannot be read: {exc.strerror}; mount the directory where the DMS "
                f"writes allocation logs there, readable by this user (uid {os.geteuid()}), "
                "or unset dms_log_dir"
            ) from None
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("token", "operator_token")
    @classmethod
    def _header_safe(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _HEADER_TOKEN.fullmatch(value.get_secret_value()):
            raise ValueError("a bearer token is printable ASCII without spaces")
        return value

    @model_validator(mode="after")
    def _one_dms(self, info: ValidationInfo) -> GatewayConfig:
        """A real DMS or the embedded devnet, chosen: never the devnet by default, where a
        typo in one variable would run a production gateway's pods on its own host."""
        if self.devnet and self.dms_url is not None:
            raise ValueError(
                f"devnet ({_source(info, 'devnet')}) and dms_url ({_source(info, 'dms_url')}) "
                "are both set: the gateway talks to one DMS; keep one"
            )
        if not self.devnet and self.dms_url is None:
            raise ValueError(_NO_DMS)
        return self

    @model_validator(mode="after")
    def _tokens_off_loopback(self, info: ValidationInfo) -> GatewayConfig:
        """Off loopback, anyone on the network can connect: the plugin API (which runs
        commands) needs its token, the operator port's ``/metrics`` the operator token."""
        if not self.listen.is_loopback and self.token is None:
            raise ValueError(
                f"listen ({_source(info, 'listen')}) = {self.listen} is not loopback, so the "
                f"plugin API needs a bearer token: set ${TOKEN_ENV} or token_file, or listen "
                "on a unix socket or 127.0.0.1"
            )
        if not self.operator_listen.is_loopback and self.operator_token is None:
            moved = f" (${TOKEN_ENV} is the plugin API's alone)" if self.token else ""
            raise ValueError(
                f"operator_listen ({_source(info, 'operator_listen')}) = {self.operator_listen} "
                f"is not loopback, so /metrics needs a bearer token: set ${OPERATOR_TOKEN_ENV} "
                f"or operator_token_file{moved}, or listen on 127.0.0.1"
            )
        return self

    @property
    def embedded_devnet(self) -> bool:
        """The gateway starts the embedded devnet and talks to it (``--devnet``)."""
        return self.devnet

    @property
    def plugin_token(self) -> SecretStr | None:
        """What the plugin API requires: the token on TCP, nothing on a unix socket, whose
        mode is its credential (interLink sends none, interLink#336)."""
        return None if self.listen.is_unix else self.token

    def server_options(self) -> ServerOptions:
        return ServerOptions(
            listen=self.listen,
            operator_listen=self.operator_listen,
            token=_revealed(self.plugin_token),
            operator_token=_revealed(self.operator_token),
            max_body_bytes=self.max_body_bytes,
            deadline_s=self.deadline_s,
            shutdown_grace_s=self.shutdown_grace_s,
        )

    def secret_values(self) -> list[str]:
        """What :class:`~dmsgw.interlink.gateway_log.Redactor` must blank out wherever it
        appears."""
        secrets = (self.token, self.operator_token, self.passphrase)
        return [s.get_secret_value() for s in secrets if s is not None]

    def describe(self) -> dict[str, str]:
        """Each setting with its source, secrets shown only as set or not: the start-up log."""
        shown = self.model_dump(mode="json", exclude=set(_SECRET_KEYS))
        described = {
            key: f"{'unset' if value is None else value} ({self.sources.get(key, 'default')})"
            for key, value in shown.items()
        }
        for key in sorted(_SECRET_KEYS):
            described[key] = "set" if getattr(self, key) is not None else "not set"
        if self.token is not None and self.plugin_token is None:
            described["token"] = "set, unused: the plugin API is on a unix socket"
        return described


def _revealed(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


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
    then ``env``, then the YAML file (``config_file``, else ``$DMSGW_CONFIG``), then defaults."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    sources: dict[str, str] = {}
    named_by = "flag --config" if config_file else f"env {CONFIG_ENV}"
    chosen = config_file or env.get(CONFIG_ENV)
    if chosen:
        _add_file(Path(chosen).expanduser(), named_by, values, sources)
    for setting in SETTINGS:
        if env.get(setting.env):  # an empty variable is unset, as an empty key in the file
            values[setting.key], sources[setting.key] = env[setting.env], f"env {setting.env}"
    for key, value in (flags or {}).items():
        if value is not None:
            values[key], sources[key] = value, f"flag {_BY_KEY[key].flag}"
    _add_secrets(values, sources, env)
    try:
        return GatewayConfig.model_validate(
            {**values, "sources": sources}, context={"sources": sources, "env": env}
        )
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from None


def _add_file(
    path: Path, named_by: str, values: dict[str, object], sources: dict[str, str]
) -> None:
    """The file's settings into ``values``, each source naming the file and the line."""
    try:
        found = read_config_file(path, named_by)
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from None
    problems = [_refuse_key(key, found.source(key)) for key in found.lines if key not in _BY_KEY]
    if problems:
        raise ConfigError("; ".join(problems))
    for key, value in found.values.items():
        values[key] = _relative_to(path.parent, value) if key in _FILE_PATH_KEYS else value
        sources[key] = found.source(key)


def _refuse_key(key: str, source: str) -> str:
    if key in _SECRETS_IN_FILE:
        return (
            f"{key} ({source}): secrets are not read from the config file; "
            + (_SECRETS_IN_FILE[key])
        )
    close = difflib.get_close_matches(key, list(_BY_KEY), n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(_BY_KEY)}"
    return f"{key} ({source}): unknown key; {hint}"


def _relative_to(base: Path, value: object) -> object:
    if not isinstance(value, str):
        return value
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _add_secrets(
    values: dict[str, object], sources: dict[str, str], env: Mapping[str, str]
) -> None:
    """The passphrase from the environment; each token from its variable or its file."""
    if env.get(PASSPHRASE_ENV):
        values["passphrase"], sources["passphrase"] = env[PASSPHRASE_ENV], f"env {PASSPHRASE_ENV}"
    _add_token("token", TOKEN_ENV, values, sources, env)
    _add_token("operator_token", OPERATOR_TOKEN_ENV, values, sources, env)


def _add_token(
    key: str,
    variable: str,
    values: dict[str, object],
    sources: dict[str, str],
    env: Mapping[str, str],
) -> None:
    """``key`` from ``$variable``, else from the file ``<key>_file`` names; not both."""
    file_key = f"{key}_file"
    token_file = values.get(file_key)
    if env.get(variable) and token_file:
        raise ConfigError(
            f"{key}: both ${variable} and {file_key} ({sources[file_key]}) are set; keep one"
        )
    if env.get(variable):
        values[key], sources[key] = env[variable], f"env {variable}"
    elif isinstance(token_file, str | Path) and token_file:
        path = Path(token_file).expanduser()
        values[key] = _read_token(path, f"{file_key} ({sources[file_key]})")
        sources[key] = f"{file_key} {token_file}"


def _read_token(path: Path, named: str) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{named}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{named}: {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"{named}: {path} is empty")
    return token


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
