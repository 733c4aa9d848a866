"""What a gateway needs to find its pods again after a restart, and to collect what interLink
has forgotten: the owner label it stamps on every ensemble (:class:`OwnedEnsembles`), and when
interLink last named each pod in its polls (:class:`PollLedger`).

Several gateways may share one DMS: a gateway only ever re-adopts or collects the ensembles
that carry its own owner label, and never those without one (deployed before the label
existed).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping

from ...actors.sharded import ShardedDict
from ...behaviors.catalog import DEPLOYMENT_LIST, DEPLOYMENT_SHUTDOWN
from ...behaviors.deployment import DeploymentListRequest, DeploymentShutdownRequest
from ...behaviors.ensemble import EnsembleConfig
from ...behaviors.node import Invoke
from ...behaviors.status import DeploymentStatus
from ...clock import NS_PER_SECOND, Clock
from ...errors import DmsgwError
from ...transport.rest import TransportError
from ..records.pod_record import POD_UID_KEY
from ..wire import k8s
from ..wire.bodies import PodStatus

log = logging.getLogger(__name__)

ORPHAN_GRACE_S = 300.0
"""How long interLink must have gone on polling other pods without naming a pod before that
pod counts as deleted (see :meth:`~dmsgw.interlink.gateway.Gateway.collect_orphans`)."""
OWNER_KEY = "dmsgw.io/owner"
"""Ensemble metadata: the gateway that deployed it (its DID). A gateway collects and re-adopts
only ensembles that carry its own; older ensembles without the label are never collected."""


class OwnedEnsembles:
    """The ensembles of the gateway ``owner`` (its DID), as the DMS lists them by
    :data:`OWNER_KEY`. A gateway without an owner (``""``) stamps, finds and owns nothing."""

    def __init__(self, invoke: Invoke, owner: str) -> None:
        self._invoke = invoke
        self.owner = owner

    def stamp(self, config: EnsembleConfig) -> EnsembleConfig:
        """``config`` labelled as this gateway's."""
        return labelled(config, OWNER_KEY, self.owner)

    def owns(self, metadata: Mapping[str, str] | None) -> bool:
        """Whether an ensemble with this metadata was deployed by this gateway."""
        return bool(self.owner) and (metadata or {}).get(OWNER_KEY) == self.owner

    async def live_one_of(self, uid: str) -> str:
        """The live ensemble this gateway deployed for pod ``uid``, if the DMS still runs one.
        A listing the DMS does not answer raises :class:`TransportError`: "no ensemble" would
        report a pod that may well be running as gone."""
        if not self.owner:
            return ""
        wanted = {POD_UID_KEY: uid, OWNER_KEY: self.owner}
        try:
            listing = await self._invoke(DEPLOYMENT_LIST, DeploymentListRequest(metadata=wanted))
        except TransportError:
            raise
        except DmsgwError:
            return ""
        live = [
            d
            for d in listing.deployments or ()
            if (d.metadata or {}).get(POD_UID_KEY) == uid
            and self.owns(d.metadata)
            and DeploymentStatus.parse(d.status)
            not in (DeploymentStatus.COMPLETED, DeploymentStatus.FAILED)
        ]
        return live[-1].orchestrator_id if live else ""

    async def strays(self, known: Collection[str]) -> list[str]:
        """Running ensembles that this gateway deployed for a pod not in ``known`` (UIDs).
        Another gateway's, and those without an owner, are not."""
        if not self.owner:
            return []
        try:
            listing = await self._invoke(
                DEPLOYMENT_LIST,
                DeploymentListRequest(metadata={OWNER_KEY: self.owner}),
            )
        except DmsgwError:
            return []
        return [
            d.orchestrator_id
            for d in listing.deployments or ()
            if self.owns(d.metadata)
            and (d.metadata or {}).get(POD_UID_KEY)
            and (d.metadata or {}).get(POD_UID_KEY) not in known
            and DeploymentStatus.parse(d.status) == DeploymentStatus.RUNNING
        ]

    async def shut_down(self, ensemble_id: str) -> None:
        """Shut a stray ensemble down; a failure is logged (the next pass tries again)."""
        try:
            await self._invoke(DEPLOYMENT_SHUTDOWN, DeploymentShutdownRequest(ensemble_id))
        except DmsgwError as exc:
            log.info("shutdown of stray ensemble %s: %s", ensemble_id, exc)


def labelled(config: EnsembleConfig, key: str, value: str) -> EnsembleConfig:
    """``config`` with the metadata ``key`` set to ``value`` (as it is, when ``value`` is
    empty)."""
    if not value or config.v1 is None:
        return config
    metadata = {**(config.v1.metadata or {}), key: value}
    return dataclasses.replace(config, v1=dataclasses.replace(config.v1, metadata=metadata))


class PollLedger:
    """When interLink last named each pod in a status poll (or the gateway took the pod on),
    and when it last polled about any pod: the proof that interLink, alive and polling, has
    forgotten a pod (deleted while the gateway was down)."""

    def __init__(self, clock: Clock, grace_s: float) -> None:
        self._clock = clock
        self._grace_ns = grace_s * NS_PER_SECOND
        self._named: ShardedDict[str, int] = ShardedDict()  # UID -> when last named (or taken)
        self._polled_ns: int | None = None  # when interLink last asked about any pod
        self.started_ns = clock()

    def took(self, uid: str) -> None:
        """The gateway took pod ``uid`` on: the wait for a first poll naming it starts now."""
        self._named[uid] = self._clock()

    def drop(self, uid: str) -> None:
        self._named.pop(uid, None)

    def heard_of(self, uids: Iterable[str]) -> None:
        """interLink polled these pods now: it is alive, and still wants each of them (a poll
        naming no pod, as its ping is, proves neither)."""
        named = list(uids)
        if not named:
            return
        now = self._polled_ns = self._clock()
        for uid in named:
            if uid in self._named:
                self._named[uid] = now

    def last_named_ns(self, uid: str) -> int:
        """When interLink last named ``uid`` (or the gateway took it, or started)."""
        return self._named.get(uid, self.started_ns)

    def forgotten_since(self, since_ns: int) -> bool:
        """Whether interLink has polled other pods at least a grace period after ``since_ns``
        (proof that it is alive and no longer asks about what it last heard of then)."""
        if self._polled_ns is None:
            return False
        return self._polled_ns - since_ns >= self._grace_ns


def unknown_pod_status(pod: k8s.Pod) -> PodStatus:
    """A pod this gateway has no record of: reported ended with an error, so that it does not
    hang in Pending forever (interLink keeps polling a pod until it ends)."""
    ended = k8s.ContainerStatus.model_validate(
        {
            "name": "",
            "ready": False,
            "restartCount": 0,
            "image": "",
            "imageID": "",
            "state": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "NotFound",
                    "message": "the gateway has no record of this pod, and the DMS runs "
                    "no ensemble for it",
                }
            },
        }
    )
    names = [c.name for c in pod.spec.containers] or [pod.metadata.name or "pod"]
    return PodStatus.model_validate(
        {
            "name": pod.metadata.name,
            "UID": pod.metadata.uid,
            "namespace": pod.metadata.namespace,
            "JID": "",
            "containers": [ended.model_copy(update={"name": n}).to_wire() for n in names],
            "initContainers": [],
        }
    )
