"""The interLink plugin API over HTTP, the operator endpoints beside it, and the runner of both.

interLink 0.6.2 calls its plugin (us) on four routes with JSON bodies and counts anything but
exactly HTTP 200 as a failure whose text it copies into the pod's status. So every answer is
either the Go type's JSON with 200, or a status code with **one line of plain text** that names
the problem; every backend call but a log stream's body runs under a deadline well within
interLink's own 120 s (:mod:`.routes`).

Before any route runs, every request passes the front door (:func:`admit`): a request from a web
page (``Origin``) is refused 403, one without a verified token must name in ``Host`` the address
it arrived at (421), plugin bodies must be ``application/json`` (415) and arrive within
``body_timeout_s`` (408) (:mod:`.front_door`). The servers listen on a unix socket or on
loopback; off loopback they need a bearer token (:mod:`.listening`). The operator app
(``/healthz``, ``/readyz``, ``/metrics``, ``/pods``, ``/stats/summary``) listens on its own
address (:mod:`.operator_port`, :mod:`.metrics`).

What the gateway actors implement is :class:`PluginBackend` (:mod:`.backend`); :class:`Serve`
runs the two apps over one until SIGTERM/SIGINT and then shuts down in order (stop accepting,
drain, close) (:mod:`.runner`). How both behave is :class:`ServerOptions` (:mod:`.options`).
"""

from .backend import PluginBackend
from .front_door import CLIENT_GONE, admit, host_is_local
from .listening import (
    DEFAULT_PLUGIN_PORT,
    DEFAULT_PLUGIN_SOCKET,
    AddressError,
    ListenAddress,
    ServeError,
    default_plugin_listen,
    require_token_for,
)
from .metrics import DmsCalls, LoopStalls, Metrics, MetricsError
from .operator_port import Health, Pods, operator_app
from .options import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_OPERATOR_PORT,
    DEFAULT_SHUTDOWN_GRACE_S,
    MAX_DEADLINE_S,
    ServerOptions,
)
from .routes import SESSION_HEADER, PluginServer
from .runner import BackendFactory, Serve, ServeInfo

__all__ = [
    "CLIENT_GONE",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_OPERATOR_PORT",
    "DEFAULT_PLUGIN_SOCKET",
    "DEFAULT_PLUGIN_PORT",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "MAX_DEADLINE_S",
    "SESSION_HEADER",
    "AddressError",
    "BackendFactory",
    "DmsCalls",
    "Health",
    "ListenAddress",
    "LoopStalls",
    "Metrics",
    "MetricsError",
    "PluginBackend",
    "PluginServer",
    "Pods",
    "Serve",
    "ServeError",
    "ServeInfo",
    "ServerOptions",
    "admit",
    "default_plugin_listen",
    "host_is_local",
    "operator_app",
    "require_token_for",
]
