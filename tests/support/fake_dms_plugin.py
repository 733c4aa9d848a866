"""The plugin API of a gateway over the fake DMS: what tests of the refusals at ``/create``
drive, where nothing may be stored or deployed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.server import Metrics, PluginServer
from tests.support.gateway_fakes import FakeDMS, gateway_on

OWNER = "did:key:the-gateway"


@contextlib.asynccontextmanager
async def fake_dms_plugin(
    tmp_path: Path, dms: FakeDMS | None = None, **parts: Any
) -> AsyncIterator[tuple[TestClient[Any, Any], FakeDMS]]:
    """A test client of the plugin API of a gateway over ``dms`` (a new :class:`FakeDMS` when
    ``None``), made of ``parts`` besides, and that DMS."""
    dms = dms or FakeDMS(tmp_path / "logs")
    clock = parts.pop("clock", FixedClock(1_700_000_000 * NS_PER_SECOND))
    gateway = await gateway_on(dms, tmp_path / "state", owner=OWNER, clock=clock, **parts)
    env = {"DMSGW_DEVNET": "1", "DMSGW_STATE_PATH": str(tmp_path / "unused.sqlite3")}
    config = load_config(env=env)
    server = PluginServer(gateway, config.server_options(), Metrics(process=False))
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"), headers={"Content-Type": "application/json"}
    )
    await client.start_server()
    try:
        yield client, dms
    finally:
        await client.close()
        await gateway.close()
