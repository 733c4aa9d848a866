"""Shared fixtures: the golden vectors produced by the DMS Go packages; a private state dir."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


def load_vector(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


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
        yield
