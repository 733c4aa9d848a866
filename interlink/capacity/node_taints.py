"""Why the gateway cannot take new pods well right now, as the virtual node's taints.

interLink's virtual kubelet marks its node not Ready on any ping answer but 200, and
Kubernetes then evicts every pod on it after their toleration of ``node.kubernetes.io/
not-ready`` (300 s by default): a DMS outage of five minutes would delete every running job.
So the ping answers 200 while the gateway itself serves, and says what is wrong with
``NoSchedule`` taints instead, which keep new pods away and leave running ones alone
(decision 85). interLink replaces the node's taints, but for its own
``virtual-node.interlink/no-schedule``, with the list a 200 ping carries, so every ping
carries the whole list, empty once every cause has ended.

Pure: :func:`node_taints` and :func:`ping_status` read a :class:`NodeState`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ...behaviors.resources import Resources
from ...clock import NS_PER_SECOND
from ...keys.ucan.token import format_second
from ..wire.bodies import TaintResponse

__all__ = [
    "CAPACITY_EXHAUSTED",
    "DMS_UNREACHABLE",
    "GRANT",
    "GRANT_MARGIN_S",
    "NO_PEERS",
    "NodeState",
    "node_taints",
    "has_room",
    "ping_status",
]

DMS_UNREACHABLE = "dmsgw.io/dms-unreachable"
"""The DMS did not answer the last gathering of the peers' free resources."""
GRANT = "dmsgw.io/grant"
"""The gateway's grant from the DMS has run out (``expired``) or runs out within
:data:`GRANT_MARGIN_S` (``expiring``): a pod placed now could not be followed for long."""
NO_PEERS = "dmsgw.io/no-peers"
"""The DMS answered, but no peer (not even the DMS itself) reported free resources."""
CAPACITY_EXHAUSTED = "dmsgw.io/capacity-exhausted"
"""Peers answered, but none has a free core and free memory left."""
GRANT_MARGIN_S = 3600.0
"""How long before the grant runs out the node is tainted: time enough for an operator to
renew it (the ``grant_expiry_seconds`` gauge warns earlier) before pods start to fail."""


@dataclasses.dataclass(frozen=True)
class NodeState:
    """What the ping knows now. ``peers`` counts the peers that reported free resources,
    ``None`` when the DMS did not answer (then ``dms_error`` says why, and
    ``dms_silent_since_ns`` since when); ``room`` tells whether one of them has a free core
    and free memory (:func:`has_room`); ``grant_expiry_ns`` is ``None`` for a gateway the DMS
    trusts as a root (nothing runs out). ``first_gathering`` is true while no gathering has
    ended yet (``peers`` is then ``None`` too): nothing is known, nothing is wrong."""

    now_ns: int
    peers: int | None
    room: bool = True
    grant_expiry_ns: int | None = None
    dms_error: str = ""
    dms_silent_since_ns: int | None = None
    first_gathering: bool = False


def has_room(free: Iterable[Resources]) -> bool:
    """Whether one of the peers' ``free`` resources has a free core and free memory."""
    return any(r.cpu.cores > 0 and r.ram.size > 0 for r in free)


def node_taints(state: NodeState) -> list[TaintResponse]:
    """The taints for ``state``, each ``NoSchedule``, in a fixed order (an unchanged list
    gives an unchanged node)."""
    return [taint for taint, _ in _causes(state) if taint is not None]


def ping_status(state: NodeState) -> str:
    """The ping's ``status``: ``ok``, or ``degraded:`` and each cause in words. interLink
    shows it in the node's ``Ready`` condition message (``kubectl describe node``)."""
    causes = [why for _, why in _causes(state)]
    return "degraded: " + "; ".join(causes) if causes else "ok"


def _causes(state: NodeState) -> list[tuple[TaintResponse | None, str]]:
    """Each cause that holds now: its taint (``None``: words alone), and the words for it."""
    causes: list[tuple[TaintResponse | None, str]] = []
    if state.first_gathering:
        causes.append((None, "the peers' free resources are being gathered for the first time"))
    elif state.peers is None:
        since = state.dms_silent_since_ns or state.now_ns
        causes.append(
            (
                _taint(DMS_UNREACHABLE, "true"),
                f"the DMS has not answered since {format_second(since)} "
                f"({(state.now_ns - since) // NS_PER_SECOND} s: {state.dms_error}); "
                "running pods show their last known status",
            )
        )
    expiry = state.grant_expiry_ns
    if expiry is not None and expiry <= state.now_ns:
        causes.append((_taint(GRANT, "expired"), f"the grant ran out at {format_second(expiry)}"))
    elif expiry is not None and expiry - state.now_ns <= GRANT_MARGIN_S * NS_PER_SECOND:
        causes.append((_taint(GRANT, "expiring"), f"the grant runs out at {format_second(expiry)}"))
    if state.peers == 0:
        causes.append((_taint(NO_PEERS, "true"), "no DMS peer reports free resources"))
    elif state.peers and not state.room:
        causes.append(
            (_taint(CAPACITY_EXHAUSTED, "true"), "no DMS peer has a free core and free memory")
        )
    return causes


def _taint(key: str, value: str) -> TaintResponse:
    return TaintResponse(key=key, value=value, effect="NoSchedule")
