"""Values a container reads from the pod: ConfigMap and Secret data as the API server merges
it, and the downward API's ``fieldRef`` and ``resourceFieldRef`` as the kubelet resolves them.
Shared by the environment (:mod:`.env`) and the files of volumes (:mod:`.files`)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal

from ..wire import k8s
from .checks import PodTranslationError
from .pod_context import PodContext
from .pod_network import annotated_pod_ip
from .reservation import PLAIN_RESOURCES, quantity

_FIELD_KEY = re.compile(r"metadata\.(labels|annotations)\['(.*)'\]", re.DOTALL)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate (a ``\\ud800`` escape in the JSON) as U+FFFD, which
    is what Go made of it."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) < 0xE000 else c for c in text).encode()


def secret_data(secret: k8s.Secret) -> dict[str, bytes]:
    """``data`` with ``stringData`` over it, as the API server merges them."""
    return {**secret.data, **{k: utf8(v) for k, v in secret.string_data.items()}}


def config_map_data(cm: k8s.ConfigMap | None) -> dict[str, bytes] | None:
    if cm is None:
        return None
    return {**{k: utf8(v) for k, v in cm.data.items()}, **cm.binary_data}


def _go_quote(text: str) -> str:
    """Go's ``%q``, as the kubelet writes label and annotation values into downward API files."""
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    escapes |= {"\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


def _format_map(values: Mapping[str, str]) -> str:
    """``fieldpath.FormatMap``: ``key="value"`` lines in key order."""
    return "\n".join(f"{key}={_go_quote(values[key])}" for key in sorted(values))


def field_value(
    ctx: PodContext, selector: k8s.ObjectFieldSelector, path: str, *, whole_maps: bool
) -> str:
    """A ``fieldRef``: what the kubelet's downward API gives for the field."""
    meta = ctx.pod.metadata
    field = selector.field_path
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
        "spec.nodeName": ctx.pod.spec.node_name,
        "spec.serviceAccountName": ctx.pod.spec.service_account_name,
    }
    if field in simple:
        return simple[field]
    if field == "status.podIP":
        ip = ctx.options.pod_ip or annotated_pod_ip(ctx.pod) or ctx.pod.status.pod_ip
        if not ip:
            raise PodTranslationError(path, "status.podIP is not known before the pod is deployed")
        return ip
    keyed = _FIELD_KEY.fullmatch(field)
    if keyed:
        values = meta.labels if keyed[1] == "labels" else meta.annotations
        return values.get(keyed[2], "")
    if whole_maps and field in ("metadata.labels", "metadata.annotations"):
        return _format_map(meta.labels if field == "metadata.labels" else meta.annotations)
    raise PodTranslationError(path, f"field {field!r} is not supported")


def resource_value(
    ctx: PodContext, selector: k8s.ResourceFieldSelector, path: str, default_container: str
) -> str:
    """A ``resourceFieldRef``: limits are what the container was given (its reservation, as the
    kubelet reports node allocatable for an unset limit), requests as written (or the limit, as
    the API server defaults them)."""
    name = selector.container_name or default_container
    target = ctx.by_name.get(name)
    if not name or target is None:
        raise PodTranslationError(path, f"no container {name!r} in the pod")
    kind, _, resource = selector.resource.partition(".")
    if kind not in ("limits", "requests") or resource not in PLAIN_RESOURCES:
        raise PodTranslationError(path, f"resource {selector.resource!r} is not supported")
    divisor = quantity(selector.divisor or "1", f"{path}.divisor")
    if divisor <= 0:
        raise PodTranslationError(f"{path}.divisor", "must be positive")
    amounts = ctx.amounts[name]
    limit = {
        "cpu": amounts.cpu,
        "memory": Decimal(amounts.memory),
        "ephemeral-storage": Decimal(amounts.disk),
    }
    if kind == "limits":
        value = limit[resource]
    else:
        res = target.spec.resources
        text = res.requests.get(resource) or res.limits.get(resource)
        value = quantity(text, path) if text else Decimal(0)
    return str(math.ceil(value / divisor))
