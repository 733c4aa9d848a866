"""Shared fixtures: the golden vectors produced by the DMS Go packages; a private state dir; an
injected clock; the plugin API of a gateway on its embedded devnet. What they are built of lives
in ``tests/support/``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dmsgw.clock import NS_PER_SECOND, FixedClock
from tests.support.plugin_api import Plugin, open_plugin
from tests.support.vectors import load_vector


@pytest.fixture(scope="session")
def vectors() -> Any:
    return load_vector


@pytest.fixture(autouse=True, scope="session")
def private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's state directory stays out of the tests: a `dmsgw devnet up` running in the
    user's shell must not become the DMS that tests connect to, nor the tests' own announce
    itself to the user's commands."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
        patch.setenv("DMSGW_AGENT", "off")  # nor a `dmsgw agent` of the user's run their commands
        yield


@pytest.fixture
async def turn() -> AsyncIterator[Callable[[], int]]:
    """The number of the loop's current turn (a task that counts them)."""
    count = 0

    async def counting() -> None:
        nonlocal count
        while True:
            count += 1
            await asyncio.sleep(0)

    counter = asyncio.get_running_loop().create_task(counting())
    yield lambda: count
    counter.cancel()


@pytest.fixture
def clock() -> FixedClock:
    """A clock that moves only when the test advances it (a module may start it elsewhere)."""
    return FixedClock(1_700_000_000 * NS_PER_SECOND)


@pytest.fixture
async def plugin(tmp_path: Path) -> AsyncIterator[Plugin]:
    """interLink's plugin API of a gateway on its embedded devnet (:func:`open_plugin`)."""
    async with open_plugin(tmp_path) as opened:
        yield opened
