"""dms-gateway: speak NuNet DMS behaviors under a DID/capability-signed identity.

``dmsgw.connect()`` gives a typed DMS client (see :mod:`dmsgw.behaviors.session`). The
sub-packages, foundation first: Go's JSON rules (:mod:`dmsgw.gojson`), identity and capability
tokens (:mod:`dmsgw.keys`), DMS I/O (:mod:`dmsgw.transport`), the actor runtime
(:mod:`dmsgw.actors`), the behavior catalog and its typed facade (:mod:`dmsgw.behaviors`), the
interLink plugin (:mod:`dmsgw.interlink`), the embedded devnet (:mod:`dmsgw.devnet`) and the
commands (:mod:`dmsgw.cli`). See ``docs/architecture.md``.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .behaviors.session import Node, connect

__all__ = ["Node", "__version__", "connect"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``import dmsgw.keys`` stays light.
    if name in ("connect", "Node"):
        import importlib

        return getattr(importlib.import_module("dmsgw.behaviors.session"), name)
    raise AttributeError(f"module 'dmsgw' has no attribute {name!r}")
