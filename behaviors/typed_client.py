"""The typed client facade: every behavior of the catalog as a method on a namespace.

``dms.peers.list()``, ``dms.deployment.status("ens-1")``, ``dms.deployment.new("job.yaml")``:
the namespaces mirror the behavior paths (see ``Behavior.namespace``), each method's parameters
are the fields of the behavior's request model, and ``help()`` shows the behavior's doc.

One call works both ways: from plain code (a classic ``python`` REPL, a script) it returns the
result; where an event loop is running in the calling thread (``python -m asyncio``, Jupyter,
async code) it returns an awaitable. How a call is carried out is the :class:`Invoker`'s
business (the gateway's ``NodeActor``); this module only knows models.

One method does more than its behavior, because the behavior's reply is not what its caller
wants: ``dms.deployment.logs(id, "alloc1")`` takes an allocation's name as the ensemble names it
(``node1.alloc1`` also works), and returns the text the DMS wrote (:class:`AllocationLogs`), not
the directory on the DMS host that ``/dms/node/deployment/logs`` replies with.
``dms.invoke("/dms/node/deployment/logs", …)`` is the behavior as it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..errors import DmsgwError
from ..gojson import GoDecodeError, encode_any
from .catalog import (
    BY_NAMESPACE,
    DEPLOYMENT_LOGS,
    DEPLOYMENT_MANIFEST,
    NEWEST_DMS,
    Behavior,
    Rep,
    Req,
    WireModel,
    get_behavior,
    require_in_version,
)
from .deployment import DeploymentLogsRequest, DeploymentManifestRequest
from .ensemble import EnsembleConfig, EnsembleConfigV1
from .status import AllocationManifest

M = TypeVar("M", bound=WireModel)


class ClientArgumentError(DmsgwError):
    """Arguments that do not fit the behavior's request."""


class LogsUnreadableError(DmsgwError):
    """The DMS wrote an allocation's logs where this machine cannot read them."""


class Invoker(Protocol):
    """What carries a call out (coroutines run on :attr:`loop`)."""

    loop: asyncio.AbstractEventLoop

    async def invoke(
        self,
        behavior: Behavior[Req, Rep],
        payload: Req | None,
        *,
        to: str | None,
        timeout_s: float | None,
    ) -> Rep: ...

    async def broadcast(
        self, behavior: Behavior[Req, Rep], payload: Req | None, *, timeout_s: float | None
    ) -> list[Rep]: ...


class Pending(Awaitable[Any]):
    """The result of a call made inside a running event loop: ``await`` it."""

    def __init__(self, future: asyncio.Future[Any], what: str) -> None:
        self._future = future
        self._what = what

    def __await__(self) -> Any:
        return self._future.__await__()

    def __repr__(self) -> str:
        state = "done" if self._future.done() else "pending"
        return f"<{self._what} ({state}): an event loop is running here, so use `await`>"


def run(invoker: Invoker, make: Callable[[], Coroutine[Any, Any, Any]], what: str) -> Any:
    """Run ``make()`` on the invoker's loop: block for the result in plain code, hand back an
    awaitable when the calling thread runs an event loop."""
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if here is None:
        return asyncio.run_coroutine_threadsafe(make(), invoker.loop).result()
    if here is invoker.loop:
        return Pending(asyncio.ensure_future(make()), what)
    bridged = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), invoker.loop))
    return Pending(bridged, what)


# --- request building ---------------------------------------------------------------------


def _ensemble(value: Any) -> EnsembleConfig:
    """An ensemble from what a user has at hand: a config, its v1 body, a YAML path, a dict."""
    if isinstance(value, EnsembleConfig):
        return value
    if isinstance(value, EnsembleConfigV1):
        return EnsembleConfig(value)
    if isinstance(value, (str, Path)):
        from .ensemble_yaml import load_ensemble_yaml

        return load_ensemble_yaml(Path(value))
    if isinstance(value, Mapping):
        body = value if "v1" in value else {"v1": value}
        return _from_plain(EnsembleConfig, body, "ensemble")
    kind = type(value).__name__
    raise ClientArgumentError(
        f"an ensemble must be an EnsembleConfig, a YAML file path or a dict, got {kind}"
    )


_COERCE: dict[type, Callable[[Any], Any]] = {EnsembleConfig: _ensemble}


def _from_plain(cls: type[M], value: Any, what: str) -> M:
    try:
        return cls.from_json(encode_any(value))
    except (GoDecodeError, DmsgwError) as exc:
        raise ClientArgumentError(f"{what}: {exc}") from None


def _field_type(model: type[Any], attr: str) -> type | None:
    hints = inspect.get_annotations(model, eval_str=True)
    hint = hints.get(attr)
    return hint if isinstance(hint, type) else None


def build_request(
    b: Behavior[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> WireModel | None:
    """The request model for ``b`` from positional/keyword field values, a model instance,
    or a dict in the wire's shape."""
    model = b.request
    if model is None:
        if args or kwargs:
            raise ClientArgumentError(f"{b.name} takes no arguments")
        return None
    if len(args) == 1 and not kwargs:
        if isinstance(args[0], model):
            return args[0]
        if isinstance(args[0], Mapping) and not _is_single_field_value(model, args[0]):
            return _from_plain(model, args[0], b.name)
    fields = [f for f in dataclasses.fields(model) if "go" in f.metadata]  # type: ignore[arg-type]
    if len(args) > len(fields):
        raise ClientArgumentError(
            f"{b.name} takes at most {len(fields)} arguments, got {len(args)}"
        )
    values = dict(zip((f.name for f in fields), args, strict=False))
    for name, value in kwargs.items():
        if name not in {f.name for f in fields}:
            known = ", ".join(f.name for f in fields)
            raise ClientArgumentError(f"{b.name} has no field {name!r} (fields: {known})")
        if name in values:
            raise ClientArgumentError(f"{b.name}: {name!r} given twice")
        values[name] = value
    for name, value in list(values.items()):
        coerce = _COERCE.get(_field_type(model, name) or object)
        if coerce is not None:
            values[name] = coerce(value)
    try:
        request = model(**values)
        request.to_json()  # type-checks every field now, with a message naming it
    except (TypeError, DmsgwError) as exc:
        raise ClientArgumentError(f"{b.name}: {exc}") from None
    return request


def _is_single_field_value(model: type[Any], value: Mapping[str, Any]) -> bool:
    """A dict given for a request whose only field is itself dict-like (e.g. an ensemble),
    unless it is the request in its wire shape, keyed by that field's JSON name (Go's
    decoder matches it case-insensitively: ``{"Ensemble": …}`` is the whole request)."""
    fields = [f for f in dataclasses.fields(model) if "go" in f.metadata]
    if len(fields) != 1 or _field_type(model, fields[0].name) not in _COERCE:
        return False
    wire_name = str(fields[0].metadata["go"][0]).casefold()  # go_field: (name, type, omitempty)
    return not any(isinstance(k, str) and k.casefold() == wire_name for k in value)


def _timeout(b: Behavior[Any, Any], value: Any) -> float | None:
    """``timeout=``: seconds the message lives, a positive number (or None: the default)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ClientArgumentError(f"{b.name}: timeout is a number of seconds, not {value!r}")
    if not value > 0:  # also refuses NaN
        raise ClientArgumentError(
            f"{b.name}: timeout must be a positive number of seconds, got {value:g}"
        )
    return float(value)


# --- the facade ---------------------------------------------------------------------------


def _signature(b: Behavior[Any, Any]) -> inspect.Signature:
    params = []
    if b.request is not None:
        for f in dataclasses.fields(b.request):  # type: ignore[arg-type]
            if "go" in f.metadata:
                default = (
                    f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
                )
                params.append(
                    inspect.Parameter(
                        f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default
                    )
                )
    if not b.broadcast:
        params.append(inspect.Parameter("to", inspect.Parameter.KEYWORD_ONLY, default=None))
    params.append(inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(params)


def _method(invoker: Invoker, b: Behavior[Any, Any]) -> Callable[..., Any]:
    def call(*args: Any, to: str | None = None, timeout: float | None = None, **kwargs: Any) -> Any:
        payload = build_request(b, args, kwargs)
        seconds = _timeout(b, timeout)
        if b.broadcast:
            if to is not None:
                raise ClientArgumentError(f"{b.name} is a broadcast: it has no single target")
            return run(invoker, lambda: invoker.broadcast(b, payload, timeout_s=seconds), b.name)
        return run(invoker, lambda: invoker.invoke(b, payload, to=to, timeout_s=seconds), b.name)

    _describe(call, b, b.reply.__name__)
    return call


def _describe(call: Callable[..., Any], b: Behavior[Any, Any], returns: str, doc: str = "") -> None:
    """Name, signature and ``help()`` text of the facade method for ``b``."""
    call.__name__ = b.namespace[-1]
    call.__qualname__ = ".".join(b.namespace)
    call.__signature__ = _signature(b)  # type: ignore[attr-defined]
    extra = f" Broadcast on {b.topic}; returns a list of {returns}." if b.broadcast else ""
    call.__doc__ = (
        f"{doc or b.doc}\n\nBehavior {b.name} (capability {b.capability}); returns "
        f"{returns}.{extra}\n"
        "`to=` a peer ID, DID or handle JSON invokes another DMS through this one; "
        "`timeout=` seconds the message lives."
    )


# --- deployment.logs: the text, by the allocation's name ------------------------------------


@dataclasses.dataclass(frozen=True)
class AllocationLogs:
    """What an allocation wrote to stdout and stderr; ``str()`` is both, in that order."""

    allocation: str
    """Its full name in the deployment, ``<node>.<allocation>``."""
    stdout: str
    stderr: str
    written_to: str
    """The directory on the DMS host where the DMS wrote them."""

    def __str__(self) -> str:
        return self.stdout + self.stderr


def allocation_key(
    ensemble_id: str, name: str, allocations: Mapping[str, AllocationManifest] | None
) -> str:
    """``name`` as the deployment knows it: a full ``node.allocation`` key, or the one key
    whose allocation part is ``name``."""
    keys = sorted(allocations or {})
    if name in keys:
        return name
    matches = [k for k in keys if k.partition(".")[2] == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ClientArgumentError(
            f"{ensemble_id}: {name!r} is on several nodes ({', '.join(matches)}): name one"
        )
    if not keys:
        raise ClientArgumentError(
            f"{ensemble_id} has no allocations yet: they exist once it is placed (Committing)"
        )
    raise ClientArgumentError(
        f"{ensemble_id} has no allocation {name!r} (it has: {', '.join(keys)})"
    )


def _read_logs(key: str, written_to: str) -> AllocationLogs:
    """The files the DMS wrote; they are on the DMS's host, so this fails elsewhere, saying so.
    A file missing from the directory is an empty output: ``WriteAllocationLogs`` writes none."""
    directory = Path(written_to)

    def read(name: str) -> str:
        try:
            return (directory / name).read_text(errors="replace")
        except FileNotFoundError:
            if not directory.is_dir():
                raise
            return ""

    try:
        stdout, stderr = read("stdout.log"), read("stderr.log")
    except OSError as exc:
        raise LogsUnreadableError(
            f"the DMS wrote the logs of {key} to {written_to} on its host, which cannot be read "
            f"here ({exc.strerror or exc}): read them on the DMS host"
        ) from None
    return AllocationLogs(key, stdout, stderr, written_to)


def _deployment_logs(invoker: Invoker, b: Behavior[Any, Any]) -> Callable[..., Any]:
    async def fetch(
        ensemble_id: str, name: str, to: str | None, seconds: float | None
    ) -> AllocationLogs:
        where = DeploymentManifestRequest(ensemble_id)
        deployed = await invoker.invoke(DEPLOYMENT_MANIFEST, where, to=to, timeout_s=seconds)
        key = allocation_key(ensemble_id, name, deployed.manifest.allocations)
        request = DeploymentLogsRequest(ensemble_id, key)
        reply = await invoker.invoke(DEPLOYMENT_LOGS, request, to=to, timeout_s=seconds)
        return await asyncio.to_thread(_read_logs, key, reply.logs_written_to)

    def call(*args: Any, to: str | None = None, timeout: float | None = None, **kwargs: Any) -> Any:
        request = build_request(b, args, kwargs)
        seconds = _timeout(b, timeout)
        ensemble_id, name = request.ensemble_id, request.allocation_name  # type: ignore[union-attr]
        return run(invoker, lambda: fetch(ensemble_id, name, to, seconds), b.name)

    _describe(
        call,
        b,
        AllocationLogs.__name__,
        "An allocation's stdout and stderr text. `allocation_name` is its name in the ensemble "
        "(`alloc1`) or its full name (`node1.alloc1`). The DMS writes the logs on its own host: "
        "this reads them there, so it works where the DMS runs on this machine (a devnet, a "
        "local DMS). dms.invoke('/dms/node/deployment/logs', …) returns the DMS's reply as is.",
    )
    return call


_FRIENDLY: dict[str, Callable[[Invoker, Behavior[Any, Any]], Callable[..., Any]]] = {
    DEPLOYMENT_LOGS.name: _deployment_logs,
}
"""Facade methods that do more than their behavior (see the module's doc)."""


class Namespace:
    """A group of behaviors (``dms.deployment``); ``dir()`` lists what it offers."""

    def __init__(self, path: tuple[str, ...], members: dict[str, Any]) -> None:
        self._path = path
        self.__dict__.update(members)

    def __repr__(self) -> str:
        names = ", ".join(sorted(k for k in self.__dict__ if not k.startswith("_")))
        return f"<dms.{'.'.join(self._path)}: {names}>"


def build_namespaces(invoker: Invoker, version: str = NEWEST_DMS) -> dict[str, Any]:
    """The top-level attributes of a client: one :class:`Namespace` tree over the catalog of
    the DMS ``version``."""
    tree: dict[str, Any] = {}
    for path, b in BY_NAMESPACE.items():
        if version not in b.versions:
            continue
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = _FRIENDLY.get(b.name, _method)(invoker, b)

    def build(path: tuple[str, ...], members: dict[str, Any]) -> dict[str, Any]:
        return {
            name: Namespace((*path, name), build((*path, name), value))
            if isinstance(value, dict)
            else value
            for name, value in members.items()
        }

    return build((), tree)


def invoke_by_name(
    invoker: Invoker,
    behavior: str,
    payload: Any = None,
    *,
    version: str = NEWEST_DMS,
    **options: Any,
) -> Any:
    """``dms.invoke("/dms/node/…", payload, to=…)``: any behavior of the DMS ``version`` by
    name; ``payload`` may be a model, a dict in the wire's shape, JSON text, or None."""
    b = get_behavior(behavior)
    require_in_version(b, version)
    if isinstance(payload, (str, bytes)):
        try:
            payload = json.loads(payload)
        except ValueError as exc:
            raise ClientArgumentError(f"{b.name}: the payload is not JSON: {exc}") from None
    model = build_request(b, (payload,) if payload is not None else (), {})
    to, timeout = options.pop("to", None), _timeout(b, options.pop("timeout", None))
    if options:
        raise ClientArgumentError(f"unknown options: {', '.join(options)}")
    if b.broadcast:
        return run(invoker, lambda: invoker.broadcast(b, model, timeout_s=timeout), b.name)
    return run(invoker, lambda: invoker.invoke(b, model, to=to, timeout_s=timeout), b.name)
