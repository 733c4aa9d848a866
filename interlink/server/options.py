"""How the plugin and operator servers behave, checked when they are configured."""

from __future__ import annotations

import dataclasses

from .listening import ListenAddress, ServeError, require_token_for

DEFAULT_OPERATOR_PORT = 4001
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_DEADLINE_S = 30.0
# interLink's ResponseHeaderTimeout is 120 s; leave room for the network and the API's own work.
MAX_DEADLINE_S = 110.0
DEFAULT_SHUTDOWN_GRACE_S = 20.0
# interLink writes each body at once; a client that trickles one holds a connection open.
DEFAULT_BODY_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """How the plugin and operator servers behave;
    :mod:`dmsgw.interlink.configuration.serve_config` builds one."""

    listen: ListenAddress = ListenAddress()
    operator_listen: ListenAddress = ListenAddress(port=DEFAULT_OPERATOR_PORT)
    token: str | None = dataclasses.field(default=None, repr=False)
    """The plugin API's bearer token (required on TCP when set; never on a unix socket)."""
    operator_token: str | None = dataclasses.field(default=None, repr=False)
    """The operator port's, a credential of its own: its clients (Prometheus, an operator)
    are not interLink."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    deadline_s: float = DEFAULT_DEADLINE_S
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        require_token_for(self.listen, self.token)
        require_token_for(self.operator_listen, self.operator_token)
        if _same_socket(self.listen, self.operator_listen):
            raise ServeError(
                f"the plugin API (--listen) and the operator port (--operator-listen) are both "
                f"{self.listen}: give each its own address"
            )
        if self.body_timeout_s <= 0:
            raise ServeError(f"body_timeout_s must be above 0, not {self.body_timeout_s:g}")
        if self.max_body_bytes < 1:
            raise ServeError(f"max_body_bytes must be positive, not {self.max_body_bytes}")
        if not 0 < self.deadline_s <= MAX_DEADLINE_S:
            raise ServeError(
                f"deadline_s must be above 0 and at most {MAX_DEADLINE_S:g} s "
                f"(interLink waits 120 s for an answer), not {self.deadline_s:g}"
            )
        if self.shutdown_grace_s < 0:
            raise ServeError(f"shutdown_grace_s cannot be negative ({self.shutdown_grace_s:g})")

    @property
    def plugin_token(self) -> str | None:
        """What the plugin API requires: the token on TCP; nothing on a unix socket, whose
        file mode is the credential (interLink sends no token to its plugin, interLink#336)."""
        return None if self.listen.is_unix else self.token

    @property
    def metrics_token(self) -> str | None:
        """What ``/metrics`` requires: the operator token when the operator port is off
        loopback, where anyone on the network could otherwise read the gateway's state."""
        return None if self.operator_listen.is_loopback else self.operator_token


_ANY_HOST = frozenset({"", "0.0.0.0", "::"})


def _same_socket(a: ListenAddress, b: ListenAddress) -> bool:
    """Whether two servers would bind one socket (the second would fail, after the gateway
    started): one unix socket path, or one port where the hosts are one or either is any."""
    if a.path is not None or b.path is not None:
        return a.path == b.path
    hosts_meet = a.host == b.host or a.host in _ANY_HOST or b.host in _ANY_HOST
    return a.port == b.port != 0 and hosts_meet
