"""Pods as interLink sends them and the ``/create`` bodies around them: the sample bodies of
``tests/data/interlink`` (whose pod is :data:`UID`), and builders of pods, containers and config
maps for the translation's tests and the hostile-environment tests."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dmsgw.interlink.wire.bodies import RetrievedPodData

DATA = Path(__file__).parent.parent / "data" / "interlink"
UID = "0b8c6f6e-3d4a-4f0e-9c1e-2f9a7d1b5e11"
"""The pod of the sample bodies."""
SH = shutil.which("sh")
needs_sh = pytest.mark.skipif(SH is None, reason="needs a POSIX sh")


def container(name: str = "main", **fields: Any) -> dict[str, Any]:
    """A busybox container that does nothing, with ``fields`` added or replaced."""
    return {"name": name, "image": "busybox", "command": ["sh", "-c", "true"], **fields}


def make_pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Pod :data:`UID` of ``containers`` (one :func:`container` if none), with ``spec`` added."""
    return {
        "metadata": {"name": "demo", "namespace": "default", "uid": UID},
        "spec": {"containers": list(containers) or [container()], **spec},
    }


def data(
    pod: dict[str, Any],
    *,
    config_maps: Sequence[dict[str, Any]] = (),
    secrets: Sequence[dict[str, Any]] = (),
    projected: Sequence[dict[str, Any]] = (),
) -> RetrievedPodData:
    """The ``/create`` body for ``pod``, with everything sent attached to its first container
    (the translation indexes them pod-wide)."""
    sent = {
        "name": next((c["name"] for c in pod["spec"]["containers"]), ""),
        "configMaps": list(config_maps),
        "secrets": list(secrets),
        "projectedvolumemaps": list(projected),
    }
    return RetrievedPodData.model_validate({"pod": pod, "container": [sent]})


def cm(name: str, data: dict[str, str], binary: dict[str, bytes] | None = None) -> dict[str, Any]:
    """A config map as interLink sends it beside the pod."""
    value: dict[str, Any] = {"metadata": {"name": name, "namespace": "default"}, "data": data}
    if binary:
        value["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    return value
