"""The gateway's own log lines: JSON lines (the default) or text for a person at a terminal,
every line redacted (:class:`Redactor`): the configured secrets, bearer credentials,
capability token signatures and JWTs are blanked out of messages, fields and tracebacks alike.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["REDACTED", "JsonFormatter", "Redactor", "TextFormatter", "configure_logging"]

REDACTED = "[REDACTED]"


class Redactor:
    """Blanks secrets out of a finished log line: the configured secret values (raw and as
    JSON escapes them), ``Bearer`` credentials, capability token signatures (``"sig"``) and
    JWTs. It runs on the whole line, so a secret in a message, a field or a traceback is
    caught alike."""

    # A secret shorter than this is not searched for: it would blank ordinary words out.
    MIN_SECRET_LENGTH = 4
    _PATTERNS = (
        (re.compile(r"(?i)\b(bearer\s+)[^\s\"'\\,;]+"), rf"\g<1>{REDACTED}"),
        (re.compile(r'((?:\\*")sig(?:\\*")\s*:\s*(?:\\*"))[^"\\]+'), rf"\g<1>{REDACTED}"),
        (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), REDACTED),
    )

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = set()
        for secret in secrets:
            if len(secret) >= self.MIN_SECRET_LENGTH:
                forms.add(secret)
                forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
                forms.add(json.dumps(secret)[1:-1])
        # Longest first, so that a secret containing another is blanked whole.
        self._secrets = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for pattern, replacement in self._PATTERNS:
            text = pattern.sub(replacement, text)
        return text


_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
_SECRET_FIELD = re.compile(r"(?i)(passphrase|password|secret|authorization|(^|_)token$)")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra=`` fields of a record, those named like a secret blanked out."""
    return {
        key: REDACTED if _SECRET_FIELD.search(key) else value
        for key, value in record.__dict__.items()
        if key not in _RECORD_FIELDS and not key.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the record's
    extra fields, and ``exception`` (the traceback, as one string)."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return self._redact(json.dumps(entry, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value…`` for a person at a terminal."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{key}={value}" for key, value in _fields(record).items())
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if extra:
            line += f" {extra}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return self._redact(line)


def _malformed_request_as_warning(record: logging.LogRecord) -> bool:
    """aiohttp logs a client's malformed HTTP request (a request line over its limit, a bad
    header) at ERROR with a traceback, as if the gateway had failed (it answered 400): one
    WARNING line."""
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, HttpProcessingError) and exc.code < 500:
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = "malformed HTTP request from %s refused (%d): %s"
        record.args = (remote, exc.code, " ".join(str(exc.message).split())[:200])
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
    return True


class _GatewayHandler(logging.StreamHandler[TextIO]):
    """Ours, so that configuring again replaces it instead of doubling every line."""


def configure_logging(
    level: str,
    fmt: Literal["json", "text"],
    *,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Sends every logger's records to ``stream`` (stderr) as JSON lines or text, redacted."""
    handler = _GatewayHandler(stream if stream is not None else sys.stderr)
    redact = Redactor(secrets)
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _GatewayHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # One line per HTTP request of the embedded devnet's DMS API would drown the gateway's own
    # log at INFO; the plugin API logs its requests itself.
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("aiohttp.server").addFilter(_malformed_request_as_warning)  # added once
    return handler
