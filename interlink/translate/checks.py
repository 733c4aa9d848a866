"""The translation's error, and the check of pod fields the models do not type.

Every refusal is a :class:`PodTranslationError` naming the pod field it is about
(``spec.volumes[2] (nfs): volume kind not supported``). The Kubernetes models keep fields they
do not type (:class:`~dmsgw.interlink.wire.k8s.K8sModel`); :func:`check_extras` refuses any such
field that has a value, unless it is listed as having no effect once the pod is offloaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ...errors import DmsgwError
from ..wire import k8s


class PodTranslationError(DmsgwError):
    """A pod the DMS cannot run as asked; ``path`` is the pod field, ``reason`` why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


_ANY = object()
"""In a table of ignorable fields: any value has no effect once the pod is offloaded."""

POD_SPEC_IGNORED: Mapping[str, object] = {
    # Scheduling, admission and cluster networking: done by Kubernetes before the pod reaches
    # us, or (services, cluster DNS) never available to an offloaded pod.
    "schedulerName": _ANY,
    "priority": _ANY,
    "priorityClassName": _ANY,
    "preemptionPolicy": _ANY,
    "topologySpreadConstraints": _ANY,
    "schedulingGates": _ANY,
    "overhead": _ANY,
    "readinessGates": _ANY,
    "serviceAccount": _ANY,
    "enableServiceLinks": _ANY,
    "dnsPolicy": _ANY,
    "os": {"name": "linux"},
    "securityContext": _ANY,  # checked by check_security_context
}
CONTAINER_IGNORED: Mapping[str, object] = {
    "terminationMessagePath": _ANY,
    "terminationMessagePolicy": _ANY,
    "resizePolicy": _ANY,
    "securityContext": _ANY,  # checked by check_security_context
}
MOUNT_IGNORED: Mapping[str, object] = {"mountPropagation": "None", "recursiveReadOnly": "Disabled"}
_NO_IGNORED: Mapping[str, object] = MappingProxyType({})
# Security settings whose value is what a container gets anyway.
_HARMLESS_SECURITY: Mapping[str, object] = {
    "privileged": False,
    "allowPrivilegeEscalation": True,
    "readOnlyRootFilesystem": False,
    "runAsNonRoot": False,
}


def check_extras(
    model: k8s.K8sModel, path: str, ignored: Mapping[str, object] = _NO_IGNORED
) -> None:
    """Refuse a field the models do not type, unless it is empty or has no effect offloaded.

    Newer Kubernetes fields land here too, so an unknown field with a value is refused rather
    than assumed harmless.
    """
    for key, value in (model.model_extra or {}).items():
        if not value:
            continue
        accepted = ignored.get(key)
        if accepted is _ANY or (key in ignored and value == accepted):
            continue
        raise PodTranslationError(f"{path}.{key}", "not supported")


def check_security_context(model: k8s.K8sModel, path: str) -> None:
    """A security context can only be accepted when it asks for nothing: the DMS runs each
    container with its own user, capabilities and profiles."""
    context = (model.model_extra or {}).get("securityContext")
    if not context:
        return
    if not isinstance(context, dict):
        raise PodTranslationError(f"{path}.securityContext", "not supported")
    for key, value in context.items():
        if value in (None, {}, []):
            continue
        if key in _HARMLESS_SECURITY and value == _HARMLESS_SECURITY[key]:
            continue
        raise PodTranslationError(
            f"{path}.securityContext.{key}",
            "not supported: the DMS runs containers with its own user and privileges",
        )
