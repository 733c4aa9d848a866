"""Which DMS the gateway talks to, learned from the DMS itself.

A DMS does not say its version on its wire: no behavior answers it, no reply carries it
(``/public/status``, ``/dms/node/status`` and its ``config`` have no such field), and its REST
API is ``/health`` and ``/api/v1/actor/*`` only; ``nunet version`` prints a build-time string
on the DMS host. What tells the versions apart on the wire is which behaviors they have, so the
version is learned from two questions under the gateway's ``/dms/node`` grant, neither of
which changes anything on the DMS:

1. ``/dms/node/onboarding/status``, which every version the gateway speaks answers with an
   ``OnboardStatusResponse``: no answer, or another shape, is a DMS whose wire the gateway
   does not speak, refused with a message naming what was seen and the versions spoken;
2. ``/dms/node/deployment/info`` for an ID no deployment has: v0.6 answers (with an error),
   v0.5 does not have it and leaves the request unanswered until it expires.

A v0.5 DMS therefore costs :data:`PROBE_TIMEOUT_S` once, when the gateway starts.
"""

from __future__ import annotations

from typing import Any

from ..errors import DmsgwError
from ..transport.rest import DMSErrorKind, DMSTimeoutError
from .catalog import DEPLOYMENT_INFO, DMS_V05, DMS_V06, DMS_VERSIONS, ONBOARDING_STATUS, Behavior
from .deployment import DeploymentInfoRequest
from .node import DMSBehaviorError, Invoke, ReplyError

__all__ = ["PROBE_ID", "PROBE_TIMEOUT_S", "UnsupportedDmsError", "learn_dms_version"]

PROBE_TIMEOUT_S = 5.0
"""How long each question waits for its answer (the DMS answers at once when it has it)."""
PROBE_ID = "dmsgw-version-probe"
"""The deployment ID ``deployment/info`` is asked about: one no DMS gives (its IDs are hex)."""


class UnsupportedDmsError(DmsgwError):
    """A DMS whose wire the gateway does not speak: the message says what it saw."""


async def learn_dms_version(
    invoke: Invoke, where: str, *, timeout_s: float = PROBE_TIMEOUT_S
) -> str:
    """The version of the DMS ``invoke`` reaches (``where`` names it in messages): one of
    :data:`~dmsgw.behaviors.catalog.DMS_VERSIONS`, else :class:`UnsupportedDmsError`."""
    try:
        await invoke(ONBOARDING_STATUS, timeout_s=timeout_s)
    except DMSBehaviorError:
        pass  # it has the behavior: an error is an answer
    except DMSTimeoutError as exc:
        if exc.kind is DMSErrorKind.REFUSED:
            raise  # it refuses the gateway (the error says why): not a matter of versions
        raise _unsupported(where, exc) from None
    except ReplyError as exc:
        raise _unsupported(where, exc) from None
    if await _answers(invoke, DEPLOYMENT_INFO, DeploymentInfoRequest(id=PROBE_ID), timeout_s):
        return DMS_V06
    return DMS_V05


async def _answers(
    invoke: Invoke, behavior: Behavior[Any, Any], payload: Any, timeout_s: float
) -> bool:
    """Whether the DMS has ``behavior``: it answers, even with an error; it leaves a behavior
    it does not have unanswered. (It accepts the gateway: it answered ``onboarding/status``
    under the same grant, so a preflight that would refuse here only lacks what the DMS
    trusts.)"""
    try:
        await invoke(behavior, payload, timeout_s=timeout_s)
    except DMSBehaviorError:
        return True
    except DMSTimeoutError:
        return False
    return True


def _unsupported(where: str, exc: Exception) -> UnsupportedDmsError:
    spoken = ", ".join(f"DMS {v}" for v in DMS_VERSIONS)
    return UnsupportedDmsError(
        f"the DMS at {where} does not speak a wire this gateway knows: asked "
        f"{ONBOARDING_STATUS.name}, which every version it speaks answers, it saw: {exc}. "
        f"This gateway speaks {spoken}; refusing it rather than sending it what it may "
        f"misread"
    )
