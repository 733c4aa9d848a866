"""Shared fixtures: the golden vectors produced by the DMS Go packages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


def load_vector(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


@pytest.fixture(scope="session")
def vectors() -> Any:
    return load_vector
