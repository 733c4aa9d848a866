"""The state is bound to the DMS it was made with, and never resumed against another.

A pod record is a promise about a deployment on one DMS: resumed against another, the gateway
would find no such deployment there and deploy the pod again, under the operator's grant, on
machines the pod was never meant for (design principle 11). So the state file records which
DMS it belongs to (its ``state_meta``), the first time a gateway runs on it, and a gateway that
finds another DMS refuses to start, naming both, and leaves the file as it is.

A DMS is known by its root actor's handle: its peer ID and DID (what ``GET /actor/handle``
answers), not by its URL, which a Service or a port-forward can change. The embedded devnet's
nodes are made afresh on each run; it is known as :data:`EMBEDDED_DEVNET`, which no real DMS
can be. While a DMS cannot be reached, it cannot say who it is: the gateway then starts only
if the URL is the one the state was last used with, and checks the identity the first time
the DMS answers (:class:`~dmsgw.interlink.app.DmsConnection` asks it again then).

A state file from before this record (schema 0) is taken as the first DMS's, with a warning
naming the DMS and the number of pods.
"""

from __future__ import annotations

import dataclasses
import logging

from ...errors import DmsgwError
from ...transport.envelope import Handle
from .pod_store import PodStore

__all__ = ["EMBEDDED_DEVNET", "DmsIdentity", "StateBinding", "StateFromAnotherDmsError"]

log = logging.getLogger(__name__)

_IDENTITY = "dms"
_URL = "dms_url"


class StateFromAnotherDmsError(DmsgwError):
    """The state was made with another DMS than the one the gateway is pointed at."""


@dataclasses.dataclass(frozen=True)
class DmsIdentity:
    """Which DMS: ``name`` is what is compared and recorded; ``url`` where it was reached."""

    name: str
    url: str = ""

    @classmethod
    def of(cls, handle: Handle, url: str) -> DmsIdentity:
        """A real DMS, by its root actor's peer ID and DID."""
        return cls(f"DMS peer {handle.addr.host} ({handle.did})", url)

    def __str__(self) -> str:
        return f"{self.name} at {self.url}" if self.url else self.name


EMBEDDED_DEVNET = DmsIdentity("the embedded devnet")


class StateBinding:
    """Checks each DMS identity learned against the one the state ``store`` records."""

    def __init__(self, store: PodStore) -> None:
        self.store = store

    def check(self, dms: DmsIdentity) -> None:
        """Record ``dms`` as the state's DMS if it has none; refuse another one."""
        recorded = self.store.meta(_IDENTITY)
        if recorded is not None and recorded != dms.name:
            raise self._refusal(recorded, self.store.meta(_URL), str(dms))
        if recorded is None and (pods := self.store.count()):
            log.warning(
                "the state file %s (%d pods) did not record its DMS (written before 0.1.0): "
                "taking it as made with %s",
                self.store.path,
                pods,
                dms,
            )
        if recorded is None or self.store.meta(_URL) != dms.url:
            self.store.set_meta({_IDENTITY: dms.name, _URL: dms.url})

    def check_unreachable(self, url: str) -> None:
        """Before the DMS at ``url`` can say who it is: the state's DMS must have been
        reached there last, else it may be another one."""
        recorded = self.store.meta(_IDENTITY)
        if recorded is None or not self.store.count():
            return  # nothing to resume: the DMS is recorded once it answers
        last_url = self.store.meta(_URL)
        if last_url != url:
            raise self._refusal(
                recorded, last_url, f"the DMS at {url}, which cannot be asked who it is yet"
            )

    def _refusal(self, recorded: str, recorded_url: str | None, now: str) -> DmsgwError:
        made_with = f"{recorded} at {recorded_url}" if recorded_url else recorded
        return StateFromAnotherDmsError(
            f"the state file {self.store.path} ({self.store.count()} pods) was made with "
            f"{made_with}, not with {now}: point the gateway back at that DMS, or give this "
            "one its own state_path (the file is left as it is)"
        )
