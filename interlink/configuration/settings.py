"""Every setting of ``dmsgw serve``: its key in the configuration file, its flag and
``DMSGW_<KEY>`` variable, and its one line of help (:data:`SETTINGS`), with the defaults and
variable names the help quotes. :mod:`.serve_config` reads and checks them; ``dmsgw serve --help``
and ``docs/configuration.md`` list them from here."""

from __future__ import annotations

import dataclasses

from ..capacity.admission import DEFAULT_MAX_DEPLOYING
from ..pods.poll_pace import DEFAULT_POLLS_PER_S
from ..server import (
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_OPERATOR_PORT,
    DEFAULT_PLUGIN_SOCKET,
    DEFAULT_SHUTDOWN_GRACE_S,
)
from ..server.operator_port import OPERATOR_ROUTES

CONFIG_ENV = "DMSGW_CONFIG"
TOKEN_ENV = "DMSGW_TOKEN"
OPERATOR_TOKEN_ENV = "DMSGW_OPERATOR_TOKEN"
PASSPHRASE_ENV = "DMS_PASSPHRASE"
DEFAULT_NAME = "dmsgw"  # the key and the capability context `dmsgw whoami` creates
DEFAULT_PODS_CAPACITY = 1000
DEFAULT_CPU_CORES = 0.5
DEFAULT_MEMORY_MIB = 512
"""What a container that requests and limits neither gets (``TranslationOptions``' defaults)."""
PRIVILEGED_PORTS = 1024


@dataclasses.dataclass(frozen=True)
class Setting:
    """One key, readable from the file, ``DMSGW_<KEY>`` and a flag."""

    key: str
    flag: str
    metavar: str
    help: str
    switch: bool = False
    """A flag without a value (``--devnet``); its variable and file key take a boolean."""

    @property
    def env(self) -> str:
        return f"DMSGW_{self.key.upper()}"


SETTINGS: tuple[Setting, ...] = (
    Setting("dms_url", "--dms-url", "URL", "the DMS's REST API (or --devnet)"),
    Setting(
        "devnet",
        "--devnet",
        "",
        "start the embedded devnet and run pods on this host (a demo; or --dms-url)",
        switch=True,
    ),
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
        f"plugin API: a unix socket path or host:port (default {DEFAULT_PLUGIN_SOCKET}, mode "
        "0600: where interLink's installer looks, usable by this user alone)",
    ),
    Setting(
        "operator_listen",
        "--operator-listen",
        "ADDR",
        f"{', '.join(OPERATOR_ROUTES)} (default 127.0.0.1:{DEFAULT_OPERATOR_PORT}); off "
        "loopback, all but /healthz and /readyz require the operator token",
    ),
    Setting(
        "token_file",
        "--token-file",
        "FILE",
        f"file holding the plugin API's bearer token (or ${TOKEN_ENV}); a unix socket needs none",
    ),
    Setting(
        "operator_token_file",
        "--operator-token-file",
        "FILE",
        f"file holding the operator port's bearer token (or ${OPERATOR_TOKEN_ENV})",
    ),
    Setting(
        "state_path",
        "--state-path",
        "FILE",
        "SQLite state (default $XDG_STATE_HOME/dmsgw/gateway.sqlite3, with --devnet "
        "devnet.sqlite3)",
    ),
    Setting(
        "dms_log_dir",
        "--dms-log-dir",
        "DIR",
        "where the DMS writes allocation logs, checked readable at start (default: not checked)",
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
        "max_deploying",
        "--max-deploying",
        "N",
        "deployments under way at once; more pods wait Pending for their turn "
        f"(default {DEFAULT_MAX_DEPLOYING})",
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
