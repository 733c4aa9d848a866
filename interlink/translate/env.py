"""A container's environment and the kubelet's ``$(VAR)`` expansion of its command.

Literal values; leftover ``valueFrom`` is resolved from the ConfigMaps and Secrets interLink
sent, from the pod (``fieldRef``) and from the container's resources (``resourceFieldRef``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..wire import k8s
from .checks import PodTranslationError, check_extras
from .inputs import Container
from .pod_context import PodContext
from .values import field_value, resource_value, secret_data, utf8

_ENV_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
MAX_ARG_STRLEN = 32 * 4096
"""Linux's limit on one string handed to a program (``NAME=value`` and its NUL, or one
argument): ``execve`` refuses a longer one (``E2BIG``), whatever the machine, so a variable
over it can never run."""


def environment(ctx: PodContext, c: Container) -> dict[str, str]:
    """The container's variables in order (a later duplicate wins, keeping the first place)."""
    env: dict[str, str] = {}
    for i, var in enumerate(c.spec.env):
        path = f"{c.path}.env[{i}]"
        check_extras(var, path)
        if not _ENV_NAME.fullmatch(var.name):
            raise PodTranslationError(
                f"{path} ({var.name})",
                "the DMS accepts only letters, digits and _ in variable names",
            )
        value = (
            var.value
            if var.value_from is None
            else _env_source(ctx, c, var.value_from, f"{path}.valueFrom")
        )
        if value is None:
            continue
        if "\x00" in value:
            raise PodTranslationError(path, "a variable cannot hold a NUL character")
        if (size := len(f"{var.name}={value}".encode()) + 1) > MAX_ARG_STRLEN:
            raise PodTranslationError(
                f"{path} ({var.name})",
                f"{size} bytes as NAME=value; Linux runs no program with a variable over "
                f"{MAX_ARG_STRLEN} bytes (MAX_ARG_STRLEN)",
            )
        env[var.name] = value
    return env


def _env_source(ctx: PodContext, c: Container, source: k8s.EnvVarSource, path: str) -> str | None:
    """A leftover ``valueFrom``; ``None`` for an optional reference to something missing (the
    kubelet leaves such a variable unset)."""
    check_extras(source, path)
    given = [
        name
        for name in ("secret_key_ref", "config_map_key_ref", "field_ref", "resource_field_ref")
        if getattr(source, name) is not None
    ]
    if len(given) != 1:
        raise PodTranslationError(path, "exactly one source must be given")
    if source.secret_key_ref is not None:
        ref = source.secret_key_ref
        secret = ctx.secrets.get(ref.name)
        data = secret_data(secret) if secret else None
        return _keyed_text(
            data, ref.name, ref.key, bool(ref.optional), f"{path}.secretKeyRef", "Secret"
        )
    if source.config_map_key_ref is not None:
        cref = source.config_map_key_ref
        cm = ctx.config_maps.get(cref.name)
        text = {k: utf8(v) for k, v in cm.data.items()} if cm else None
        return _keyed_text(
            text, cref.name, cref.key, bool(cref.optional), f"{path}.configMapKeyRef", "ConfigMap"
        )
    if source.field_ref is not None:
        return field_value(ctx, source.field_ref, f"{path}.fieldRef", whole_maps=False)
    assert source.resource_field_ref is not None
    return resource_value(ctx, source.resource_field_ref, f"{path}.resourceFieldRef", c.spec.name)


def _keyed_text(
    data: Mapping[str, bytes] | None, name: str, key: str, optional: bool, path: str, kind: str
) -> str | None:
    if data is None:
        if optional:
            return None
        raise PodTranslationError(path, f"{kind} {name!r} was not sent by interLink")
    if key not in data:
        if optional:
            return None
        raise PodTranslationError(path, f"{kind} {name!r} has no key {key!r}")
    try:
        return data[key].decode("utf-8")
    except UnicodeDecodeError:
        raise PodTranslationError(path, f"{kind} {name!r} key {key!r} is not UTF-8 text") from None


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of command and args: ``$$`` is a literal ``$``, an
    unknown or unterminated reference stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)
