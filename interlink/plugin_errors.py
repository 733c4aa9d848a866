"""The errors by which the plugin answers interLink: one room for every refusal the routes turn
into a status code. :class:`PluginRequestError` is a 400 (:class:`TooManyPodsError` a 413), raised
while a body is read; the backend raises :class:`BackendUnavailable` for a 503,
:class:`UnknownPodError` for a 404 and :class:`PodBeingDeletedError` for a 409, and
:class:`BackendGaveUpError` ends ``dmsgw serve`` with an error."""

from __future__ import annotations

from ..errors import DmsgwError


class PluginRequestError(DmsgwError):
    """A request body interLink should not have sent; the message names where it is wrong."""


class TooManyPodsError(PluginRequestError):
    """A body naming more than :data:`~.wire.parsing.MAX_PODS_PER_REQUEST` pods, or a pod with more
    than :data:`~.wire.parsing.MAX_CONTAINERS_PER_POD` containers (answered 413)."""


class BackendUnavailable(DmsgwError):  # noqa: N818 (the name the actors use)
    """A request cannot be answered without the DMS, which did not answer: a 503 with this
    message (interLink keeps the pod as it was and asks again). A backend's ping does not
    raise it for a DMS outage (it taints the node instead, decision 85): a ping that does
    marks the virtual node not Ready, and Kubernetes then evicts its pods."""


class UnknownPodError(DmsgwError):
    """The backend has no such pod (``/getLogs`` of a pod it never saw): answered 404."""


class PodBeingDeletedError(DmsgwError):
    """A ``/create`` of a UID whose delete is still under way: answered 409 (decision 70)."""


class BackendGaveUpError(DmsgwError):
    """The backend's supervision gave up: ``dmsgw serve`` ends with a non-zero status, so that
    its service manager starts it again and crash-only recovery takes over."""
