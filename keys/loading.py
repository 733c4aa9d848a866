"""A client's identity from disk: its key (a ``nunet key`` file) and its capability contexts
(``nunet cap`` files), as ``dmsgw.connect()`` and ``dmsgw serve`` both load them.

Each accepts an object already in memory in place of a name, so that a script or a test can
hand in a key or a context it built itself.
"""

from __future__ import annotations

from pathlib import Path

from ..clock import Clock
from .crypto import PrivKey
from .keystore import KeyStore
from .trust import provider_from_private_key
from .ucan.context import CapabilityContext
from .ucan.store import default_cap_dir, load_context

DEFAULT_KEY_NAME = "dmsgw"


def load_key(
    key: str | PrivKey | None, key_dir: Path | None, passphrase: str | None
) -> tuple[str, PrivKey]:
    """The key named ``key`` (default :data:`DEFAULT_KEY_NAME`) in ``key_dir``, and its name;
    without a ``passphrase`` it is read from ``$DMS_PASSPHRASE`` or asked for."""
    if isinstance(key, PrivKey):
        return DEFAULT_KEY_NAME, key
    name = key or DEFAULT_KEY_NAME
    return name, KeyStore(key_dir).unlock(name, passphrase)


def load_capabilities(
    context: str | CapabilityContext | None,
    name: str,
    key: PrivKey,
    cap_dir: Path | None,
    clock: Clock,
) -> CapabilityContext:
    """The capability context ``context`` in ``cap_dir``, signing with ``key``. Without a name
    it is the context named after the key (``name``), or an empty one when there is no such
    file: a key nobody has granted anything yet still connects, and is told what it lacks."""
    if isinstance(context, CapabilityContext):
        return context
    provider = provider_from_private_key(key)
    context_name = context or name
    path = (cap_dir or default_cap_dir()) / f"{context_name}.cap"
    if context is None and not path.exists():
        return CapabilityContext(provider, name=context_name, clock=clock)
    return load_context(context_name, provider, directory=cap_dir, clock=clock)


def load_dms_model(
    dms_context: str | CapabilityContext | None, cap_dir: Path | None, clock: Clock
) -> CapabilityContext | None:
    """The DMS's own context (default ``dms.cap``, if present), a model of what the DMS
    trusts that explains its refusals; ``None`` when there is none."""
    if isinstance(dms_context, CapabilityContext):
        return dms_context
    name = dms_context or "dms"
    path = (cap_dir or default_cap_dir()) / f"{name}.cap"
    if dms_context is None and not path.exists():
        return None
    return load_context(name, None, directory=cap_dir, clock=clock)
