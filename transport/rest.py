"""The DMS local REST API (``/api/v1/actor/...``) as a transport of signed envelopes.

The REST API carries envelopes and nothing else: it does no authorization of its own, and an
envelope the DMS refuses (bad signature, missing capability, expired) is dropped silently, so
``/actor/invoke`` answers 408 when the envelope expires. :class:`DMSTimeoutError` says so.
Every error that is the DMS's answer (or its silence) is a :class:`DMSError`, whose ``kind``
callers branch on instead of its text.
"""

from __future__ import annotations

import asyncio
import enum
import json
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol

import aiohttp

from ..errors import DmsgwError
from ..gojson import GoDecodeError
from . import envelope as env
from .envelope import Envelope, Handle
from .preflight import Verdict

DEFAULT_URL = "http://127.0.0.1:9999"
API_PREFIX = "/api/v1/actor"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class TransportError(DmsgwError):
    """The DMS could not be reached or answered something that is not the DMS API."""


class DMSErrorKind(enum.Enum):
    """What a DMS error means to its caller: decided once, where the answer is read, so that
    no caller reads the DMS's text (the DMS sends text only, no code)."""

    NOT_FOUND = "not found"
    """The DMS does not know what the request names (a deployment it never had, or lost)."""
    REFUSED = "refused"
    """The DMS dropped the message unanswered, and the preflight says why it refuses it."""
    TIMEOUT = "timeout"
    """No reply before the message expired, and nothing known says the DMS refuses it."""
    OTHER = "other"
    """Any other error the DMS answered."""


class DMSError(DmsgwError):
    """An error that is the DMS's answer, or its silence; ``kind`` says which."""

    kind: DMSErrorKind = DMSErrorKind.OTHER


class DMSTimeoutError(TransportError, DMSError):
    """HTTP 408: no reply before the envelope expired — which is also how a DMS answers an
    envelope it refused (it drops those silently). ``verdict`` is the preflight's, when one ran;
    ``kind`` is ``REFUSED`` when that verdict refuses the message, else ``TIMEOUT``.
    """

    def __init__(self, behavior: str, *, detail: str = "", verdict: Verdict | None = None) -> None:
        hint = detail or (
            "The DMS also answers this way when it silently drops a message it does not "
            "accept: run the preflight (`dmsgw cap check`) to see whether it would accept it"
        )
        super().__init__(f"{behavior}: no reply before the message expired (HTTP 408). {hint}")
        self.behavior = behavior
        self.verdict = verdict
        refused = verdict is not None and not verdict.accepted
        self.kind = DMSErrorKind.REFUSED if refused else DMSErrorKind.TIMEOUT


class DMSRequestError(TransportError, DMSError):
    """HTTP 400 or 500 from the DMS API, with its ``error`` text."""

    def __init__(self, behavior: str, status: int, message: str) -> None:
        super().__init__(f"{behavior}: the DMS answered HTTP {status}: {message}")
        self.behavior = behavior
        self.status = status


class Transport(Protocol):
    """What the client needs from a DMS connection (REST, or in-memory in tests)."""

    async def handle(self, *, refresh: bool = False) -> Handle: ...

    async def invoke(self, envelope: Envelope) -> Envelope: ...

    async def send(self, envelope: Envelope) -> None: ...

    async def broadcast(self, envelope: Envelope) -> list[Envelope]: ...

    async def close(self) -> None: ...


class RestTransport:
    """One aiohttp session (connections reused) with at most ``max_concurrency`` requests in
    flight; the DMS root handle is fetched once and refreshed on demand."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        max_concurrency: int = 64,
        connect_timeout_s: float = 10.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._owns_session = session is None
        self._session = session
        self._connect_timeout_s = connect_timeout_s
        self._max_concurrency = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency)
        self._handle: Handle | None = None
        self._fetching = asyncio.Lock()  # callers at once fetch the handle once

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_concurrency)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
            self._owns_session = True
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> RestTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def handle(self, *, refresh: bool = False) -> Handle:
        """The DMS root actor's handle (``GET /actor/handle``)."""
        if self._handle is not None and not refresh:
            return self._handle
        async with self._fetching:
            if self._handle is None or refresh:
                self._handle = await self._fetch_handle()
        return self._handle

    async def _fetch_handle(self) -> Handle:
        status, body = await self._request("GET", "/handle", None, "GET /actor/handle")
        if status != 200:
            text = _error_text(body) + self._hint(reached=True)
            raise DMSRequestError("GET /actor/handle", status, text)
        try:
            return Handle.from_json(body)
        except GoDecodeError as exc:
            raise TransportError(f"{self.base_url} did not answer a DMS handle: {exc}") from None

    async def invoke(self, envelope: Envelope) -> Envelope:
        """``POST /actor/invoke``: the DMS forwards the envelope and returns the first reply."""
        status, body = await self._request("POST", "/invoke", envelope, envelope.be)
        self._check(status, body, envelope.be)
        return _decode_reply(body, envelope.be)

    async def send(self, envelope: Envelope) -> None:
        """``POST /actor/send``: fire and forget."""
        status, body = await self._request("POST", "/send", envelope, envelope.be)
        self._check(status, body, envelope.be)

    async def broadcast(self, envelope: Envelope) -> list[Envelope]:
        """``POST /actor/broadcast``: every reply that arrived before the envelope expired."""
        status, body = await self._request("POST", "/broadcast", envelope, envelope.be)
        self._check(status, body, envelope.be)
        try:
            items = json.loads(body) if body else None
        except ValueError:
            raise TransportError(f"{envelope.be}: broadcast replies are not JSON") from None
        if items is None:
            return []  # Go marshals an empty reply list as null
        if not isinstance(items, list):
            raise TransportError(f"{envelope.be}: broadcast replies are not a JSON list")
        return [_decode_reply(json.dumps(item).encode(), envelope.be) for item in items]

    def _check(self, status: int, body: bytes, behavior: str) -> None:
        if status == 200:
            return
        if status == 408:
            raise DMSTimeoutError(behavior)
        raise DMSRequestError(behavior, status, _error_text(body))

    async def _request(
        self, method: str, path: str, envelope: Envelope | None, what: str
    ) -> tuple[int, bytes]:
        url = self.base_url + API_PREFIX + path
        data = env.wire(envelope) if envelope is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with self._slots:
            try:
                async with self._client().request(method, url, data=data, headers=headers) as resp:
                    return resp.status, await _read_body(resp, what)
            except aiohttp.ClientError as exc:
                raise TransportError(
                    f"{what}: cannot reach the DMS at {self.base_url}: {exc}"
                    + self._hint(reached=False)
                ) from None

    def _hint(self, *, reached: bool) -> str:
        """What to try when no DMS API is where the URL says: at the default URL, start one;
        a URL that names the API's path is one level too deep (the client adds it)."""
        base, api, _ = self.base_url.partition(API_PREFIX.rsplit("/", 1)[0])
        if api:
            return f". The URL names the DMS without {api}: try --url {base}"
        if reached:
            return ". Is this the address of a DMS's REST API?"
        if self.base_url == DEFAULT_URL:
            return (
                ". No DMS there: start one with `dmsgw devnet up`, or name yours with --url "
                "(or $DMSGW_DMS_URL)"
            )
        return ""


async def _read_body(resp: aiohttp.ClientResponse, what: str) -> bytes:
    """The whole body, up to :data:`MAX_RESPONSE_BYTES`. Read to the end, so that aiohttp
    returns the connection to its pool: a body left unread closes it, and every request
    would pay for a new one."""
    length = resp.content_length
    if length is not None and length <= MAX_RESPONSE_BYTES:
        return await resp.read()  # the length bounds it; one read, no iterator (a DMS's way)
    too_large = TransportError(f"{what}: reply larger than {MAX_RESPONSE_BYTES} bytes")
    if (length or 0) > MAX_RESPONSE_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _error_text(body: bytes) -> str:
    """The DMS's ``error`` text; anything else in one line (a web page: its title)."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return _one_line(body.decode("utf-8", "replace"))
    if isinstance(parsed, Mapping) and isinstance(parsed.get("error"), str):
        return str(parsed["error"])
    return body.decode("utf-8", "replace")[:500]


def _one_line(text: str) -> str:
    """A body that is not the DMS's JSON, as one line of at most 200 characters: a web page is
    named by its title, which is what a server's error page says."""
    if text.lstrip()[:1] == "<":
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        named = f": {' '.join(title.group(1).split())[:120]!r}" if title else ""
        return f"a web page{named}, not the DMS API"
    return " ".join(text.split())[:200] or "(empty body)"


def _decode_reply(body: bytes, behavior: str) -> Envelope:
    try:
        return env.decode(body)
    except env.EnvelopeError as exc:
        raise TransportError(f"{behavior}: the reply is not an envelope: {exc}") from None
