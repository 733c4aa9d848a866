"""Where the servers listen, and the rule for exposure.

The servers listen on a unix socket or on loopback; a non-loopback address is refused unless a
bearer token is configured (:func:`require_token_for`), and then every request on it must carry
it (the plugin API's token on TCP, never on its unix socket). interLink 0.6.2 itself sends no
``Authorization`` to its plugin (interLink#336), so a token only makes sense behind a proxy
that adds it. A :class:`Listener` binds one app to one address
and removes its unix socket when it stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import os
import re
import socket
import stat
from pathlib import Path

from aiohttp import web

from ...errors import DmsgwError

DEFAULT_PLUGIN_PORT = 4000
DEFAULT_PLUGIN_SOCKET = "~/.interlink/.plugin.sock"
"""Where the plugin API listens by default: where interLink's installer points interLink
(``SidecarURL: unix://$HOME/.interlink/.plugin.sock``), as a socket only its owner may use."""
SOCKET_MODE = 0o600
"""A unix socket's mode: connecting needs write permission on it, so only its owner (and
root) can; this is the plugin API's credential on a socket, one interLink needs no
configuration for."""


class ServeError(DmsgwError):
    """The server cannot start as configured (address in use, non-loopback without a token…)."""


class AddressError(DmsgwError, ValueError):
    """A listen address that is neither a unix socket path nor ``host:port``."""


_HOSTNAME = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+")
_UNIX_PATH_MAX = 107  # sun_path is 108 bytes with its NUL


@dataclasses.dataclass(frozen=True)
class ListenAddress:
    """Where a server listens: a unix socket ``path``, else ``host``:``port``."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PLUGIN_PORT
    path: Path | None = None

    @classmethod
    def parse(cls, text: str, *, default_port: int = DEFAULT_PLUGIN_PORT) -> ListenAddress:
        """``unix:///run/dmsgw.sock``, ``/run/dmsgw.sock``, ``127.0.0.1:4000``, ``[::1]:4000``,
        ``4000`` (loopback) or ``http://127.0.0.1:4000`` (interLink's own spelling)."""
        text = text.strip()
        if not text:
            raise AddressError("empty address: give a unix socket path or host:port")
        if text.startswith("unix://"):
            return cls._unix(text.removeprefix("unix://"), text)
        if text.startswith(("/", "./", "~")):
            return cls._unix(text, text)
        rest = text.removeprefix("http://")
        if "/" in rest.rstrip("/"):
            raise AddressError(f"{text!r}: an address has no path; use host:port")
        return cls._tcp(rest.rstrip("/"), text, default_port)

    @classmethod
    def _unix(cls, path: str, text: str) -> ListenAddress:
        if not path:
            raise AddressError(f"{text!r}: the unix socket path is empty")
        resolved = Path(path).expanduser()
        if len(os.fsencode(resolved)) > _UNIX_PATH_MAX:
            raise AddressError(
                f"{text!r}: a unix socket path is at most {_UNIX_PATH_MAX} bytes long"
            )
        return cls(path=resolved)

    @classmethod
    def _tcp(cls, rest: str, text: str, default_port: int) -> ListenAddress:
        if rest.isdigit():
            host, port_text = "127.0.0.1", rest
        elif rest.startswith("["):
            host, sep, port_text = rest[1:].partition("]:")
            if not sep:
                raise AddressError(f"{text!r}: expected [IPv6]:port")
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
        elif ":" in rest:
            raise AddressError(f"{text!r}: write an IPv6 address in brackets, [::1]:port")
        else:
            host, port_text = rest, str(default_port)
        return cls(host=_check_host(host, text), port=_check_port(port_text, text))

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    @property
    def is_loopback(self) -> bool:
        """A unix socket counts as loopback: only local processes allowed by its file mode
        reach it. A host name other than ``localhost`` is not trusted to stay local."""
        if self.path is not None:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def url(self) -> str:
        """``unix:///path`` or ``http://host:port``: what interLink's ``SidecarURL`` names."""
        if self.path is not None:
            return f"unix://{self.path}"
        return f"http://{self}"

    def endpoint(self, route: str) -> str:
        """How to reach ``route`` here, for people: a URL, or a ``curl --unix-socket`` line."""
        if self.path is not None:
            return f"curl --unix-socket {self.path} http://localhost{route}"
        return f"http://{self}{route}"

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _check_host(host: str, text: str) -> str:
    if not host:
        raise AddressError(f"{text!r}: give a host (0.0.0.0 for every interface)")
    if host == "localhost":  # one socket, not one per address localhost resolves to
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(host):
        raise AddressError(f"{text!r}: {host!r} is neither an IP address nor a host name")
    return host


def _check_port(port_text: str, text: str) -> int:
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise AddressError(f"{text!r}: the port must be a number from 0 to 65535")
    return int(port_text)


def require_token_for(listen: ListenAddress, token: str | None) -> None:
    """The one rule for exposure: off loopback, a listener needs a bearer token."""
    if not listen.is_loopback and not token:
        raise ServeError(
            f"listening on {listen}, which is not loopback, needs a bearer token "
            "(the plugin API's or the operator port's), or listen on a unix socket or 127.0.0.1"
        )


# --- listeners -----------------------------------------------------------------------------


@dataclasses.dataclass
class Listener:
    """One app bound to one address; removes its unix socket (if still its own) on stop."""

    runner: web.AppRunner
    address: ListenAddress
    inode: int | None

    @classmethod
    async def start(cls, app: web.Application, where: ListenAddress, grace_s: float) -> Listener:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=grace_s)
        await runner.setup()
        try:
            site: web.BaseSite
            if where.path is not None:
                _claim_socket_path(where.path)
                site = web.SockSite(runner, _private_socket(where.path))
            else:
                site = web.TCPSite(runner, where.host, where.port)
            await site.start()
        except (OSError, ServeError) as exc:
            await runner.cleanup()
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ServeError(f"cannot listen on {where}: {reason}") from None
        if where.path is not None:
            return cls(runner, where, where.path.stat().st_ino)
        return cls(runner, dataclasses.replace(where, port=runner.addresses[0][1]), None)

    async def stop(self) -> None:
        await self.runner.cleanup()
        path = self.address.path
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_ino == self.inode:
                    path.unlink()


def default_plugin_listen() -> ListenAddress:
    """:data:`DEFAULT_PLUGIN_SOCKET` in this user's home."""
    return ListenAddress.parse(DEFAULT_PLUGIN_SOCKET)


def _private_socket(path: Path) -> socket.socket:
    """A socket listening at ``path`` with :data:`SOCKET_MODE` from the moment it exists (the
    mask is narrowed around ``bind``, which creates the file), whatever the process's mask."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o777 & ~SOCKET_MODE)
        try:
            sock.bind(str(path))
        finally:
            os.umask(previous)
        os.chmod(path, SOCKET_MODE)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def _claim_socket_path(path: Path) -> None:
    """A stale socket (its server died) is removed; a live one, or any other file, is not. A
    missing directory whose parent exists is made, private (``~/.interlink`` on a new host)."""
    if not path.parent.is_dir() and path.parent.parent.is_dir():
        path.parent.mkdir(mode=0o700)
    if not path.parent.is_dir():
        raise ServeError(f"directory {path.parent} does not exist")
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ServeError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink(missing_ok=True)
            return
    raise ServeError(f"another process is listening on {path}")
