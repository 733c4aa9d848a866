"""pytest plugin: a connected DMS devnet for integration tests (entry point ``dmsgw``).

Fixtures:

``dms_devnet`` (module scope)
    A :class:`DevnetHandle`: a connected client (``handle.dms``, a :class:`dmsgw.Node`) and
    waiting helpers. By default it starts the embedded devnet; when ``DMSGW_DEVNET_URL`` names a
    real DMS it connects there instead, with the key ``DMSGW_DEVNET_KEY`` (default ``dmsgw``)
    and the capability context ``DMSGW_DEVNET_CONTEXT`` (default: the key's name) from
    ``DMSGW_KEY_DIR`` / ``DMSGW_CAP_DIR`` (default ``~/.nunet``), unlocked with
    ``DMS_PASSPHRASE``. That context must hold a grant of what the embedded devnet's gateway
    gets (``GATEWAY_CAPABILITIES``: ``/dms/node``, ``/public`` and ``/broadcast`` on topic
    ``/nunet``; ``dmsgw devnet grant --anchor dmsgw`` grants exactly that on a ``dmsgw devnet
    up``). Tests written against it run unchanged on both.

``embedded_devnet`` (function scope)
    An :class:`EmbeddedDevnet`: the same, on a fresh embedded devnet, plus ``faults``
    (:class:`~dmsgw.devnet.faults.Faults`) and ``devnet`` for inspection. Fault injection has no
    meaning on a real DMS, so this fixture fails (it does not skip) when ``DMSGW_DEVNET_URL`` is
    set; tests using it carry the ``devnet_embedded`` marker, so
    ``-m "not devnet_embedded"`` deselects them.

``host_dir`` (function scope)
    A fresh host directory that the embedded devnet's allocations may read and write (a devnet
    started as root runs each pod as an unprivileged user of its own, who cannot reach a
    test's ``tmp_path``); removed afterwards.

Only the standard library, pytest and :mod:`dmsgw.devnet_files.devnet_record` (standard library
only) are imported until a fixture is used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from ..devnet_files.devnet_record import GATEWAY_CAPABILITIES, GATEWAY_TOPICS

if TYPE_CHECKING:
    from ..behaviors.session import Node
    from ..behaviors.status import AllocationManifest
    from ..keys.crypto import PrivKey
    from .confinement import RunAs
    from .devnet import BackgroundDevnet, Devnet
    from .faults import Faults
    from .orchestrator import Orchestrator
    from .timeouts import Timeouts

T = TypeVar("T")

URL_ENV = "DMSGW_DEVNET_URL"
KEY_ENV = "DMSGW_DEVNET_KEY"
CONTEXT_ENV = "DMSGW_DEVNET_CONTEXT"
SETTLE_ENV = "DMSGW_DEVNET_SETTLE_S"
EMBEDDED_MARKER = "devnet_embedded"
REAL_SETTLE_S = 180.0
"""How long a real DMS may take to settle a deployment (Running, or Failed at its deadline:
the default 120 s request expiry minus 15 s, plus bids and margin)."""
EMBEDDED_SETTLE_S = 10.0
SMALL_RESOURCES = {
    "cpu": {"cores": 0.5},
    "ram": {"size": 256 * 1024**2},
    "disk": {"size": 256 * 1024**2},
}
"""Half a core, and the RAM and disk above: what any DMS node can host."""


def shell_allocation(
    kind: str, script: str, *, image: str = "busybox:1.36", **fields: Any
) -> dict[str, Any]:
    """An allocation (``task`` or ``service``) running ``sh -c script`` on the docker
    executor, in the wire's shape (``fields`` are added as they are, e.g. ``depends_on``)."""
    execution = {"type": "docker", "params": {"image": image, "cmd": ["sh", "-c", script]}}
    return {
        "executor": "docker",
        "type": kind,
        "resources": SMALL_RESOURCES,
        "execution": execution,
        **fields,
    }


def one_node_ensemble(allocations: dict[str, Any], **node: Any) -> dict[str, Any]:
    """An ensemble placing ``allocations`` on one node ``n1`` (``node``: e.g. ``peer=…``)."""
    return {
        "v1": {"allocations": allocations, "nodes": {"n1": {"allocations": [*allocations], **node}}}
    }


class DevnetHandle:
    """A DMS reached through the gateway's client, real or embedded, for tests.

    ``dms`` is the connected client; :meth:`wait_for` polls a condition with the client until
    it holds, for at most ``settle_s`` by default (on the embedded devnet it waits for the
    devnet's next change between polls instead of spinning).
    """

    def __init__(self, dms: Node, url: str, settle_s: float) -> None:
        self.dms = dms
        self.url = url
        self.settle_s = settle_s

    @property
    def embedded(self) -> bool:
        return False

    def _generation(self) -> int:
        return 0

    def _wait_change(self, seen: int, timeout_s: float) -> int:
        return seen

    def wait_for(
        self, check: Callable[[], T | None], *, what: str, timeout_s: float | None = None
    ) -> T:
        """Call ``check`` until it returns something truthy, and return that."""
        limit = self.settle_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while True:
            seen = self._generation()
            result = check()
            if result:
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"gave up after {limit:g} s waiting for {what}")
            self._wait_change(seen, min(left, 0.1))

    def wait_status(self, ensemble_id: str, *statuses: str, timeout_s: float | None = None) -> str:
        """Poll ``deployment.status`` until it is one of ``statuses``; returns it."""
        seen: list[str] = []

        def check() -> str:
            status: str = self.dms.deployment.status(ensemble_id).status
            if not seen or seen[-1] != status:
                seen.append(status)
            return status if status in statuses else ""

        try:
            return self.wait_for(
                check, what=f"{ensemble_id} to be {'/'.join(statuses)}", timeout_s=timeout_s
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc} (statuses seen: {' -> '.join(seen)})") from None

    def wait_allocation(
        self, ensemble_id: str, key: str, *statuses: str, timeout_s: float | None = None
    ) -> AllocationManifest:
        """Poll the manifest until allocation ``key`` (``node.allocation``) is in one of
        ``statuses``; returns its manifest entry."""

        def check() -> AllocationManifest | None:
            manifest = self.dms.deployment.manifest(ensemble_id).manifest
            entry = (manifest.allocations or {}).get(key)
            return entry if entry is not None and entry.status in statuses else None

        return self.wait_for(check, what=f"{key} to be {'/'.join(statuses)}", timeout_s=timeout_s)

    def stranger(self, **options: Any) -> Node:
        """A client under a fresh key that holds no capability at all. Its calls are sent, to
        see the DMS drop them: given its own transport, the client does not look for a
        running ``dmsgw devnet up``, on which it would refuse them before sending."""
        from ..behaviors.session import connect
        from ..keys.crypto import generate_key_pair
        from ..keys.trust import provider_from_private_key
        from ..keys.ucan import CapabilityContext
        from ..transport.rest import RestTransport

        key = generate_key_pair()
        context = CapabilityContext(provider_from_private_key(key))
        transport = RestTransport(self.url)
        return connect(self.url, key=key, context=context, transport=transport, **options)

    def close(self) -> None:
        self.dms.close()

    def stdout(self, ensemble_id: str, allocation: str) -> str:
        """What an allocation wrote to stdout (read on the DMS's host: this one, for the
        embedded devnet or a local DMS)."""
        stdout: str = self.dms.deployment.logs(ensemble_id, allocation).stdout
        return stdout


class EmbeddedDevnet(DevnetHandle):
    """The embedded devnet behind a :class:`DevnetHandle`, with fault injection."""

    def __init__(self, background: BackgroundDevnet, dms: Node, settle_s: float) -> None:
        from .faults import Faults

        super().__init__(dms, background.devnet.urls[0], settle_s)
        self.background = background
        self.faults: Faults = Faults(background)

    @property
    def embedded(self) -> bool:
        return True

    @property
    def devnet(self) -> Devnet:
        return self.background.devnet

    def orchestrator(self, ensemble_id: str, node: int = 0) -> Orchestrator:
        """The orchestrator of a deployment made through ``node``, to read what a DMS reply
        does not carry (exit codes, placements)."""
        deployments = self.devnet.nodes[node].deployments
        assert deployments is not None, "the node has no deployments"
        return deployments.orchestrators[ensemble_id]

    def _generation(self) -> int:
        return self.devnet.changes.generation

    def _wait_change(self, seen: int, timeout_s: float) -> int:
        return self.devnet.changes.wait(seen, timeout_s)

    def client(
        self,
        node: int = 0,
        caps: tuple[str, ...] = GATEWAY_CAPABILITIES,
        *,
        key: PrivKey | None = None,
        **options: Any,
    ) -> Node:
        """A client of ``node`` under ``key`` (default: a fresh one) granted ``caps`` by it."""
        return _granted_client(self.devnet, node, caps, key, **options)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.background.stop()


def _granted_client(
    devnet: Devnet, node: int, caps: tuple[str, ...], key: PrivKey | None, **options: Any
) -> Node:
    from ..behaviors.session import connect
    from ..keys.crypto import generate_key_pair
    from ..keys.did import DID
    from ..keys.trust import provider_from_private_key
    from ..keys.ucan import CapabilityContext

    key = key or generate_key_pair()
    subject = DID.from_public_key(key.public_key())
    grant = devnet.grant(subject, caps, topics=GATEWAY_TOPICS, node=node)
    context = CapabilityContext(provider_from_private_key(key), provide=grant)
    return connect(devnet.urls[node], key=key, context=context, **options)


def start_embedded(
    nodes: int = 3,
    *,
    seed: str = "pytest",
    isolation: str | None = None,
    timeouts: Timeouts | None = None,
    run_as: RunAs | None = None,
) -> EmbeddedDevnet:
    """Start an embedded devnet connected as a granted gateway (``isolation``: ``namespace``
    or ``rewrite`` to force one, default the best available; ``timeouts``: default
    ``TEST_TIMEOUTS``; ``run_as``: one user for every pod, instead of one each)."""
    from .devnet import BackgroundDevnet, Devnet
    from .sandbox import Isolation
    from .timeouts import TEST_TIMEOUTS

    chosen = Isolation(isolation) if isolation else None
    devnet = Devnet(
        nodes,
        seed=seed,
        timeouts=timeouts or TEST_TIMEOUTS,
        isolation=chosen,
        early_timeout=True,
        run_as=run_as,
    )
    background = BackgroundDevnet(devnet)
    background.start()
    try:
        dms = _granted_client(devnet, 0, GATEWAY_CAPABILITIES, None)
    except BaseException:
        background.stop()
        raise
    settle = float(os.environ.get(SETTLE_ENV) or EMBEDDED_SETTLE_S)
    return EmbeddedDevnet(background, dms, settle)


def connect_real(url: str) -> DevnetHandle:
    """A handle on the real DMS at ``url``, as the environment describes the gateway."""
    from ..behaviors.session import connect

    key = os.environ.get(KEY_ENV) or None
    context = os.environ.get(CONTEXT_ENV) or None
    dms = connect(url, key=key, context=context)
    return DevnetHandle(dms, url, float(os.environ.get(SETTLE_ENV) or REAL_SETTLE_S))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{EMBEDDED_MARKER}: needs the embedded DMS devnet (fault injection, inspection)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "embedded_devnet" in getattr(item, "fixturenames", ()):
            item.add_marker(EMBEDDED_MARKER)


@pytest.fixture(scope="module")
def dms_devnet() -> Iterator[DevnetHandle]:
    """A connected devnet: embedded, or the real DMS named by ``DMSGW_DEVNET_URL``."""
    url = os.environ.get(URL_ENV)
    handle = connect_real(url) if url else start_embedded()
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def embedded_devnet() -> Iterator[EmbeddedDevnet]:
    """A fresh embedded devnet with fault injection; fails when pointed at a real DMS."""
    url = os.environ.get(URL_ENV)
    if url:
        pytest.fail(
            "this test injects faults or inspects the devnet, which needs the embedded devnet, "
            f"but {URL_ENV}={url} points at a real DMS: unset {URL_ENV}, or deselect these "
            f"tests with -m 'not {EMBEDDED_MARKER}'",
            pytrace=False,
        )
    handle = start_embedded(seed="pytest-faults")
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A host directory shared with the embedded devnet's allocations (see the module):
    every user may write it, as ``/tmp`` (a root devnet runs each pod as a user of its own)."""
    path = Path(tempfile.mkdtemp(prefix="dmsgw-host-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
