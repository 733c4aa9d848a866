"""Reading interLink's request bodies into :mod:`dmsgw.interlink.wire.bodies`' models.

The parse functions are what the HTTP layer calls with a raw body: every way a body can be
wrong ends in one :class:`PluginRequestError` naming the JSON path of the problem, never in a
pydantic dump, so that the error text interLink copies into the pod status is readable. A body
is read as Go would accept it (UTF-8 JSON, no NaN, bounded depth) and may name at most
:data:`MAX_PODS_PER_REQUEST` pods; a ``/status`` body is read with the event loop getting a
turn every few pods and remembered by its digest (:func:`read_status_body`), its pods
checked for what ``/status`` reads of them (their identity) and each read whole only when
asked for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from ...actors.sharded import ShardedDict
from ...actors.turns import take_turn
from ..plugin_errors import PluginRequestError, TooManyPodsError
from . import k8s
from .apimachinery import GoModel, json_kind
from .bodies import LogStruct, RetrievedPodData

__all__ = [
    "MAX_CONTAINERS_PER_POD",
    "MAX_PODS_PER_REQUEST",
    "PodRef",
    "StatusBody",
    "in_turns",
    "parse_create_body",
    "parse_delete_body",
    "parse_logs_body",
    "parse_status_body",
    "read_status_body",
]


T = TypeVar("T")

MAX_PODS_PER_REQUEST = 10_000
MAX_CONTAINERS_PER_POD = 100
"""Containers (init and main together) one pod may have. Kubernetes sets no such limit, but
each container is a DMS allocation with its own reservation, process and logs, and the
largest pods seen in practice (sidecar meshes, batch pipelines) have a few dozen; a pod of
10,000 held the event loop for seconds. Decision 072."""
"""The most pods one ``/create`` or ``/status`` body may name. interLink asks about one pod per
``/status`` call and creates one per ``/create``; a virtual node holds up to 10,000 pods, so a
client that asks about all of them at once still fits, and nothing more can make one request
cost more than that."""

_CREATE = TypeAdapter(RetrievedPodData)
_POD = TypeAdapter(k8s.Pod)
_LOGS = TypeAdapter(LogStruct)
# Kubernetes writes a pod's UID as an RFC 4122 UUID; the gateway names files, ensembles and
# DMS metadata after it, so nothing else is taken.
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def parse_create_body(raw: bytes) -> list[RetrievedPodData]:
    """The pods of a ``/create`` body: one object since interLink 0.5, a list before.

    The 0.4 API always sent a one-element list; a longer list is accepted and every pod
    returned, an empty one refused (there would be nothing to answer a ``CreateStruct`` for).
    Each pod must be one the gateway can run: a UUID for its UID, at least one container.
    """
    text = _text(raw)
    if _is_array(text):
        items = [item for item, _, _ in _array_items(text, MAX_PODS_PER_REQUEST)]
        if not items:
            raise PluginRequestError("body: the list of pods to create is empty")
        return [_creatable(item, f"[{i}]") for i, item in enumerate(items)]
    body = _parse(text)
    if not isinstance(body, dict):
        raise PluginRequestError(
            "body: expected a JSON object (RetrievedPodData) or a list of them, "
            f"got {json_kind(body)}"
        )
    return [_creatable(body, "")]


def _creatable(item: Any, root: str) -> RetrievedPodData:
    """One pod to create, refused now if it could only fail later: a pod without containers
    has nothing to run, and a UID that is not a UUID would end up in paths and names."""
    _check_container_count(item, root)
    data = _validate(_CREATE, item, root)
    pod_root = f"{root}.pod" if root else "pod"
    _check_identity(data.pod.metadata, pod_root)
    uid = data.pod.metadata.uid
    if not _UUID.fullmatch(uid):
        raise PluginRequestError(
            f"{pod_root}.metadata.uid: {_show(uid)} is not a UUID "
            "(Kubernetes writes pod UIDs as 8-4-4-4-12 hexadecimal digits)"
        )
    if not data.pod.spec.containers:
        raise PluginRequestError(f"{pod_root}.spec.containers: a pod needs at least one container")
    return data


def _check_container_count(item: Any, root: str) -> None:
    """At most :data:`MAX_CONTAINERS_PER_POD`, counted before the pod is read (reading them
    all is what would hold the loop)."""
    body = item.get("pod") if isinstance(item, dict) else None
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        return  # the validation names what is wrong
    counts = [
        len(v) for v in (spec.get("initContainers"), spec.get("containers")) if isinstance(v, list)
    ]
    if sum(counts) > MAX_CONTAINERS_PER_POD:
        where = f"{root}.pod.spec" if root else "pod.spec"
        raise TooManyPodsError(
            f"{where}: {sum(counts)} containers (init and main); a pod may have at most "
            f"{MAX_CONTAINERS_PER_POD}"
        )


def parse_delete_body(raw: bytes) -> k8s.Pod:
    """The pod of a ``/delete`` body: the cluster's copy (``deletionTimestamp``, ``JobID``
    annotation, env not resolved), not the one ``/create`` received; match it by uid."""
    body = _load(raw)
    if not isinstance(body, dict):
        raise PluginRequestError(f"body: expected a JSON object (a Pod), got {json_kind(body)}")
    pod = _validate(_POD, body, "")
    _check_identity(pod.metadata, "")
    return pod


def parse_status_body(raw: bytes) -> list[k8s.Pod]:
    """The pods of a ``/status`` body, each read whole; an empty list is interLink's ping."""
    return [_status_pod(item, index) for index, (item, _) in enumerate(_status_items(_text(raw)))]


def _status_items(text: str) -> Iterator[tuple[Any, tuple[int, int]]]:
    """Each pod of a ``/status`` body as JSON values, and where its JSON lies in ``text``,
    decoded one at a time, so that the caller can give the event loop a turn between two."""
    if not _is_array(text):
        raise PluginRequestError(
            f"body: expected a JSON array of pods, got {json_kind(_parse(text))}"
        )
    for item, start, end in _array_items(text, MAX_PODS_PER_REQUEST, check_depth=False):
        yield item, (start, end)


def _status_pod(item: Any, index: int) -> k8s.Pod:
    """A pod of a ``/status`` body read whole, as :func:`parse_create_body` reads one."""
    if _deeper_than(item, _MAX_DEPTH - 1):
        raise PluginRequestError(_TOO_DEEP)
    pod = _validate(_POD, item, f"[{index}]")
    _check_identity(pod.metadata, f"[{index}]")
    return pod


class _Named(GoModel):
    """The part of a pod's ``metadata`` that ``/status`` reads: who the pod is. Other keys
    are left unread (``extra="ignore"``): they are checked when the whole pod is read."""

    model_config = ConfigDict(extra="ignore")

    name: str = ""
    namespace: str = ""
    uid: str = ""


class _NamedPod(GoModel):
    """A pod of a ``/status`` body as ``/status`` reads it on first sight: its identity."""

    model_config = ConfigDict(extra="ignore")

    metadata: _Named = Field(default_factory=_Named)


_NAMED_POD = TypeAdapter(_NamedPod)


def _named(item: Any, index: int) -> _Named:
    """Who the pod ``item`` is, checked as its whole read would check it: an object, its
    ``metadata`` an object, its ``name``, ``namespace`` and ``uid`` strings, name and uid
    given. The rest of the pod (its spec, its status) is what the snapshot answers for a pod
    the gateway knows; it is read and checked only when asked for (:meth:`PodRef.pod`)."""
    meta = _validate(_NAMED_POD, item, f"[{index}]").metadata
    _check_identity(meta, f"[{index}]")
    return meta


@dataclasses.dataclass(frozen=True, slots=True)
class PodRef:
    """A pod of a ``/status`` body, as the gateway looks it up: by UID. The whole pod is
    :meth:`pod`, read at most once per request, from its own part of the body."""

    uid: str
    namespace: str
    name: str
    body: StatusBody = dataclasses.field(repr=False, compare=False)
    index: int = 0

    def pod(self) -> k8s.Pod:
        return self.body.pod(self.index)


class StatusBody:
    """One ``/status`` body, shared by its :class:`PodRef`: where each pod's JSON lies, so
    that a pod is read whole from its own bytes only when asked for, at most once. Whatever
    the backend asks, a request costs work in proportion to its body, never to the body
    times its pods."""

    __slots__ = ("_pods", "_raw", "_spans", "_text")

    def __init__(
        self, raw: bytes, spans: Sequence[tuple[int, int]], text: str | None = None
    ) -> None:
        self._raw = raw
        self._spans = spans
        self._pods: list[k8s.Pod | None] = [None] * len(spans)
        self._text = text

    def pod(self, index: int) -> k8s.Pod:
        pod = self._pods[index]
        if pod is None:
            if self._text is None:
                self._text = self._raw.decode("utf-8")
            # Decoded as the body was: a pod nested too deep for this stack is refused too.
            item, _ = _decode(self._text, self._spans[index][0])
            pod = self._pods[index] = _status_pod(item, index)
        return pod


_Remembered = tuple[tuple[str, str, str, int, int], ...]
"""Per pod of a body: its UID, namespace and name, and where its JSON starts and ends."""


def remembered_uids(raw: bytes) -> list[str] | None:
    """The UIDs a ``/status`` body names, if it is a body read before (``None``: read it with
    :func:`read_status_body`, which checks it). The same pods' polls come with the same body
    every few seconds: this is what answers them."""
    known = _VALID_STATUS_BODIES.get(_digest(raw))
    return None if known is None else [uid for uid, *_ in known]


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


async def read_status_body(raw: bytes) -> list[PodRef]:
    """:func:`parse_status_body` for the server: the pods named, with the event loop getting
    a turn every few pods, and remembered by the body's digest.

    interLink polls every pod every few seconds with the same JSON until the pod changes, and
    validating a whole pod costs more than answering from its snapshot. Each distinct body is
    read once for what ``/status`` uses of it: valid JSON of at most
    :data:`MAX_PODS_PER_REQUEST` pods, each an object with a name and a UID (a bad one is
    refused every time: only good ones are kept). A pod the backend must read whole (one it
    does not know) is checked in full then, by :meth:`PodRef.pod` (decision 136). What is
    remembered is the identities the body names and where each pod lies, never more than
    the body's own size.
    """
    digest = _digest(raw)
    known = _VALID_STATUS_BODIES.get(digest)
    if known is not None:
        return _refs(known, StatusBody(raw, [(start, end) for *_, start, end in known]))
    await take_turn()  # interLink's connections may each bring one now: a few per turn
    text = _text(raw)
    found: list[tuple[str, str, str, int, int]] = []
    async for index, (item, (start, end)) in in_turns(enumerate(_status_items(text))):
        meta = _named(item, index)
        found.append((meta.uid, meta.namespace, meta.name, start, end))
    remembered = tuple(found)
    _VALID_STATUS_BODIES.put(digest, held_bytes(remembered), remembered)
    return _refs(remembered, StatusBody(raw, [(start, end) for *_, start, end in found], text))


def _refs(remembered: _Remembered, body: StatusBody) -> list[PodRef]:
    return [PodRef(uid, ns, name, body, i) for i, (uid, ns, name, _, _) in enumerate(remembered)]


_TURN = 16
"""Pods handled between two turns of the event loop: validating a pod or writing its status
is a fraction of a millisecond, so a turn holds a few milliseconds of them (bench/README.md,
"Steps per turn of the loop")."""


async def in_turns(items: Iterable[T]) -> AsyncIterator[T]:
    """``items``, with the event loop getting a turn after every few: work over one request's
    many pods must not hold up every other request (``/healthz`` included), and a deadline
    can cancel it between two."""
    for count, item in enumerate(items, 1):
        yield item
        if count % _TURN == 0:
            await asyncio.sleep(0)


class _BodyMemo:
    """Validated bodies' pods (identity and place) by digest, bounded in entries and in the
    bytes the entries hold (:func:`held_bytes`). One entry per pod interLink polls: sharded
    (decision 57), as a ``dict`` of them doubling held the loop (bench/README.md, "Maps and
    sets that double")."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._known: ShardedDict[bytes, _Remembered] = ShardedDict()
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes

    def get(self, digest: bytes) -> _Remembered | None:
        return self._known.get(digest)

    def put(self, digest: bytes, size: int, pods: _Remembered) -> None:
        if len(self._known) >= self._max_entries or self._bytes + size > self._max_bytes:
            self._known.clear()
            self._bytes = 0
        self._known[digest] = pods
        self._bytes += size


def held_bytes(remembered: _Remembered) -> int:
    """Roughly what an entry holds: each pod's three strings, and ~300 bytes of tuples and
    numbers around them (the body itself is not kept)."""
    return sum(300 + len(uid) + len(ns) + len(name) for uid, ns, name, _, _ in remembered)


MEMO_ENTRIES = 1 << 18
MEMO_BYTES = 128 << 20
"""Bounds of the remembered ``/status`` bodies: interLink sends one body per pod, so 100,000
pods are 100,000 entries of :func:`held_bytes` each, a third of :data:`MEMO_BYTES`. Bounded by
the bodies' own size instead (and an eighth of the entries), the memo was emptied past
~10,000 pods of a few KiB each, and past 32,768 pods of any size: every poll then validated
its pod again."""
_VALID_STATUS_BODIES = _BodyMemo(max_entries=MEMO_ENTRIES, max_bytes=MEMO_BYTES)


def parse_logs_body(raw: bytes) -> LogStruct:
    """The ``/getLogs`` request."""
    body = _load(raw)
    if not isinstance(body, dict):
        raise PluginRequestError(f"body: expected a JSON object (LogStruct), got {json_kind(body)}")
    return _validate(_LOGS, body, "")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Kubernetes objects nest a few dozen levels at most; far deeper JSON could be read but not
# written back (pydantic stops serialising at about 250 levels).
_MAX_DEPTH = 100
_TOO_DEEP = f"body: JSON nested deeper than {_MAX_DEPTH} levels"
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's, as Go skips it


def _load(raw: bytes) -> Any:
    """Decodes a body as Go would accept it: UTF-8 JSON, no NaN/Infinity."""
    return _parse(_text(raw))


def _text(raw: bytes) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PluginRequestError(f"body: not UTF-8 (byte {exc.start})") from None
    if not text.strip(" \t\r\n"):
        raise PluginRequestError("body: empty, expected JSON")
    return text


def _parse(text: str) -> Any:
    """The one JSON value ``text`` holds."""
    value, end = _decode(text, _skip(text, 0))
    _expect_end(text, end)
    if _deeper_than(value, _MAX_DEPTH):
        raise PluginRequestError(_TOO_DEEP)
    return value


def _is_array(text: str) -> bool:
    return text.startswith("[", _skip(text, 0))


def _array_items(
    text: str, limit: int, *, check_depth: bool = True
) -> Iterator[tuple[Any, int, int]]:
    """The items of the JSON array ``text`` holds, each with where it starts and ends, decoded
    one at a time: the caller may pause between two, and a body of more than ``limit`` items
    is refused once the first ``limit`` are read, not after decoding all of them. Without
    ``check_depth`` the caller checks the depth of the items it reads whole."""
    at = _skip(text, _skip(text, 0) + 1)
    if not text.startswith("]", at):
        for count in itertools.count():
            if count == limit:
                raise TooManyPodsError(
                    f"body: names more than {limit} pods; one request may name at most {limit}"
                )
            item, end = _decode(text, at)
            if check_depth and _deeper_than(item, _MAX_DEPTH - 1):
                raise PluginRequestError(_TOO_DEEP)
            yield item, at, end
            at = _skip(text, end)
            if not text.startswith(",", at):
                break
            at = _skip(text, at + 1)
        if not text.startswith("]", at):
            raise _not_json(json.JSONDecodeError("Expecting ',' delimiter", text, at))
    _expect_end(text, at + 1)


def _expect_end(text: str, at: int) -> None:
    """Only whitespace may follow the value that ends at ``at``."""
    end = _skip(text, at)
    if end != len(text):
        raise _not_json(json.JSONDecodeError("Extra data", text, end))


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _decode(text: str, at: int) -> tuple[Any, int]:
    """The JSON value that starts at ``at``, and where it ends."""
    try:
        value, end = _DECODER.raw_decode(text, at)
    except json.JSONDecodeError as exc:
        raise _not_json(exc) from None
    except RecursionError:
        raise PluginRequestError(_TOO_DEEP) from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long to convert
        raise PluginRequestError(f"body: not JSON: {exc}") from None
    return value, end


def _not_json(exc: json.JSONDecodeError) -> PluginRequestError:
    return PluginRequestError(f"body: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest in ``value`` more than ``limit`` deep. Walked a level
    at a time, and only through objects and arrays: every body is checked, and the strings
    and numbers, most of a pod, need no look (a tenth of a create's parse was this walk)."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level and depth < limit:
        depth += 1
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
    return bool(level)


def _validate(adapter: TypeAdapter[T], body: Any, root: str) -> T:
    """``body`` as ``adapter``'s type; a problem is named by its path below ``root``."""
    try:
        return adapter.validate_python(body)
    except ValidationError as exc:
        raise PluginRequestError(_describe(exc, root)) from None


def _check_identity(meta: k8s.ObjectMeta | _Named, root: str) -> None:
    """interLink and the virtual kubelet track a pod by uid and drop a status without a name."""
    for field, value in (("name", meta.name), ("uid", meta.uid)):
        if not value:
            where = f"{root}.metadata.{field}" if root else f"metadata.{field}"
            raise PluginRequestError(f"{where}: field required")


# --- readable validation errors ------------------------------------------------------------

_MAX_PROBLEMS = 5
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXPECTED = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "an array",
    "string_type": "a string",
    "int_type": "an integer",
    "bool_type": "true or false",
}


def _describe(exc: ValidationError, root: str) -> str:
    """``pod.spec.containers[0].image: field required; …``, at most a few problems, each
    named by its path below ``root`` (``[3]`` for the fourth pod of a list)."""
    problems = [f"{_path(e['loc'], root)}: {_message(e)}" for e in exc.errors(include_url=False)]
    shown = problems[:_MAX_PROBLEMS]
    if len(problems) > _MAX_PROBLEMS:
        more = len(problems) - _MAX_PROBLEMS
        shown.append(f"and {more} more problem{'s' if more > 1 else ''}")
    return "; ".join(shown)


def _path(loc: tuple[int | str, ...], root: str) -> str:
    parts: list[str] = [root] if root else []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif _IDENTIFIER.fullmatch(item):
            parts.append(f".{item}" if parts else item)
        else:  # a map key such as "kubernetes.io/hostname"
            parts.append(f"[{json.dumps(item)}]")
    return "".join(parts) or "body"


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "missing":
        return "field required"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {json_kind(error['input'])}"
    message = error["msg"]
    return f"{message[:1].lower()}{message[1:]} (got {_show(error['input'])})"


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
