"""``make``'s set-up of a fresh checkout: one line per step, the tools' output only when a step
fails, and then in full.

The real set-up downloads packages, so ``make`` runs here with a stand-in for ``python3``
(``PYTHON=…``): it passes the version check, makes a "virtual environment" whose python is
itself, and answers every ``pip install`` with hundreds of warning lines, as pip and setuptools
did; one run makes the installation fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOISE_LINES = 300
FAKE_PYTHON = f"""#!/bin/sh
case "$1" in
  -c) exit 0 ;;
esac
if [ "$2" = venv ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
i=0
while [ $i -lt {NOISE_LINES} ]; do echo "WARNING: pip noise $i" >&2; i=$((i + 1)); done
if [ -n "$FAKE_INSTALL_FAILS" ] && [ "$4" = -e ]; then
  echo "ERROR: No matching distribution found for pykka" >&2
  exit 1
fi
exit 0
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml of the checkout, and a stand-in python."""
    if shutil.which("make") is None:
        pytest.fail("these tests need `make`, as every user of the repository does")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return tmp_path


def _set_up(checkout: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            ".venv/.installed-stamp",
            f"PYTHON={checkout / 'fake-python'}",
        ],
        cwd=checkout,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_set_up_shows_one_line_per_step(checkout: Path) -> None:
    result = _set_up(checkout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).splitlines() == [
        "make: creating the virtual environment .venv/",
        "make: upgrading pip",
        "make: installing dms-gateway and its dependencies",
        "make: ready (set-up log: .venv/setup.log)",
    ]
    log = (checkout / ".venv" / "setup.log").read_text()
    assert log.count("WARNING: pip noise") == 2 * NOISE_LINES  # kept, for whoever wants it


def test_a_failing_step_shows_its_output_in_full(checkout: Path) -> None:
    result = _set_up(checkout, FAKE_INSTALL_FAILS="1")
    assert result.returncode != 0
    shown = result.stdout + result.stderr
    assert "ERROR: No matching distribution found for pykka" in shown
    assert shown.count("WARNING: pip noise") == 2 * NOISE_LINES
    assert (
        "make: failed: installing dms-gateway and its dependencies "
        "(the output above is in .venv/setup.log)"
    ) in shown
    assert not (checkout / ".venv" / ".installed-stamp").exists()  # the next make tries again
