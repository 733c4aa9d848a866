"""The front door every request passes before any route runs, and the refusals it answers.

A request from a web page (it carries ``Origin``) is refused 403, and one without a verified
token must name in ``Host`` the address it arrived at (421 otherwise), so that neither a
cross-site POST nor a DNS-rebinding page can reach a loopback gateway that runs commands; with
a token, the request must carry it (401). Plugin bodies must be ``application/json`` (415), as
interLink sends them. Every refusal is **one line of plain text** that names the problem, which
interLink copies into the pod's status.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
from collections.abc import Mapping

from aiohttp import web

CLIENT_GONE = 499  # nginx's "client closed request": counted apart from the server's errors


class StatusError(Exception):
    """An answer other than 200, decided before or instead of calling the backend."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        close: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.close = close  # the connection cannot be trusted for a next request


class ClientGone(Exception):  # noqa: N818 (an event, not an error of ours)
    """The client closed the connection before its request was read."""


_UNIX_HOSTS = frozenset({"unix", "localhost"})  # what interLink and curl --unix-socket send


def admit(request: web.Request, token: str | None) -> None:
    """Refuses, before any route runs, a request the gateway must not serve.

    A browser adds ``Origin`` to every request a page makes that could change something
    (cross-site or not; a top-level navigation GET has none); interLink, curl and probes
    never send it, so its presence means a web page, refused 403. With ``token`` the request
    must carry it (401); without, nothing vouches for the caller but where it connected, so
    its ``Host`` must name that address (421): a DNS-rebinding page reaches a loopback port
    under its own host name, which it cannot change.
    """
    if "Origin" in request.headers:
        raise StatusError(
            403, "origin: requests from web pages (with an Origin header) are refused"
        )
    if token is not None:
        _check_bearer(request, token)
        return
    host = request.headers.get("Host")
    transport = request.transport
    if transport is None:
        raise ClientGone
    sockname = transport.get_extra_info("sockname")
    if host is None or not host_is_local(host, sockname):
        given = "no Host header" if host is None else f"Host {_shown(host)}"
        raise StatusError(
            421, f"host: {given} does not name this gateway; use {_expected_hosts(sockname)}"
        )


def _check_bearer(request: web.Request, token: str) -> None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": "Bearer"}
    if scheme.lower() != "bearer" or not value.strip():
        raise StatusError(
            401, "authorization: send the gateway's token as Authorization: Bearer", challenge
        )
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise StatusError(401, "authorization: wrong bearer token", challenge)


@functools.lru_cache(maxsize=256)
def host_is_local(host: str, sockname: object) -> bool:
    """Whether ``host`` (a ``Host`` header) names the local end of the connection,
    ``sockname``: its IP address and port, ``localhost`` when that is loopback, and ``unix``
    or ``localhost`` for a unix socket (whatever port). Every request asks, with the same
    few pairs, and parsing the addresses was a large part of a ``/status``'s CPU
    (bench/README.md, "The cost of a request"): the answers are kept (a socket's name is a
    tuple or a string, so it is hashable)."""
    names, port = _local_names(sockname)
    name, given_port = _split_host(host)
    if name is None or name not in names:
        return False
    return port is None or given_port == port


def _local_names(sockname: object) -> tuple[frozenset[str], int | None]:
    """The host names a request to ``sockname`` may give, and the port it must give."""
    if isinstance(sockname, str | bytes):
        return _UNIX_HOSTS, None
    if not isinstance(sockname, tuple) or len(sockname) < 2:
        return frozenset(), None
    address = ipaddress.ip_address(str(sockname[0]).partition("%")[0])
    names = {_host_name(address)}
    mapped = getattr(address, "ipv4_mapped", None)  # a dual-stack socket's IPv4 peers
    if mapped is not None:
        names.add(_host_name(mapped))
    if address.is_loopback or (mapped is not None and mapped.is_loopback):
        names.add("localhost")
    return frozenset(names), int(sockname[1])


def _host_name(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def _split_host(host: str) -> tuple[str | None, int]:
    """``name`` and port of a ``Host`` header (80 when it has none); IP literals are
    normalised (``[0::1]`` is ``[::1]``), names lowered; ``None`` if it is malformed."""
    if host.startswith("["):
        literal, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None, 0
        name, port_text = f"[{literal}]", rest[1:] if rest else ""
    else:
        name, _, port_text = host.partition(":")
    if port_text and not (port_text.isdigit() and len(port_text) <= 5):
        return None, 0
    try:
        name = _host_name(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        name = name.lower()
    return name, int(port_text) if port_text else 80


def _expected_hosts(sockname: object) -> str:
    names, port = _local_names(sockname)
    shown = sorted(names) if port is None else sorted(f"{name}:{port}" for name in names)
    return " or ".join(shown) or "the address the gateway listens on"


def _shown(text: str) -> str:
    """Text a client sent, quoted and cut short for an error line."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def require_json(request: web.Request) -> None:
    """interLink sends every body as ``application/json``. A web page can send text/plain,
    a form or multipart without asking first (a CORS "simple" request), never JSON. The
    header as interLink writes it is taken without parsing it (every poll sends it)."""
    given = request.headers.get("Content-Type")
    if given is None:
        raise StatusError(415, "content-type: send the body as Content-Type: application/json")
    if given != "application/json" and request.content_type != "application/json":
        raise StatusError(
            415,
            f"content-type: send the body as application/json, not {_shown(request.content_type)}",
        )


# --- answers -------------------------------------------------------------------------------


def one_line(message: str) -> str:
    """``message`` on one line: interLink copies an answer's text into the pod's status."""
    return " ".join(message.split())


def text_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An answer of one line of plain text, the form every answer but a 200 takes."""
    return web.Response(
        status=status, text=one_line(message), content_type="text/plain", headers=headers
    )


def refusal(problem: StatusError) -> web.Response:
    """The answer to a :class:`StatusError`, closing the connection when it asks to."""
    response = text_response(problem.status, problem.message, problem.headers)
    if problem.close:
        response.force_close()
    return response
