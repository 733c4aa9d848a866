"""dms-gateway: speak NuNet DMS behaviors under a DID/capability-signed identity.

``dmsgw.connect()`` gives a typed DMS client (see :mod:`dmsgw.session`); the sub-packages are
the identity layer (:mod:`dmsgw.keys`), the behavior catalog (:mod:`dmsgw.behaviors`), what
moves bytes (:mod:`dmsgw.transport`) and the actors (:mod:`dmsgw.actors`).
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dmsgw.session import Node, connect

__all__ = ["Node", "__version__", "connect"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``import dmsgw.keys`` stays light.
    if name in ("connect", "Node"):
        import importlib

        return getattr(importlib.import_module("dmsgw.session"), name)
    raise AttributeError(f"module 'dmsgw' has no attribute {name!r}")
