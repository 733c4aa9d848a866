"""A devnet run as root runs allocations as an unprivileged user: a command that only root's
``PATH`` entries hold exits 127, and its stderr says why (issue 26, item 7)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw.devnet.pytest_plugin import EmbeddedDevnet, one_node_ensemble, shell_allocation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="allocations run as another user")


@pytest.fixture
def roots_own_tool(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A program in a directory only root may enter, first on the devnet's ``PATH``."""
    private = Path(tempfile.mkdtemp(prefix="dmsgw-root-only-"))  # 0700, root's
    tool = private / "dmsgw-root-only-tool"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{private}{os.pathsep}{os.environ['PATH']}")
    try:
        yield tool
    finally:
        tool.unlink()
        private.rmdir()


def test_a_command_only_root_can_reach_exits_127_saying_why(
    roots_own_tool: Path, embedded_devnet: EmbeddedDevnet
) -> None:
    h = embedded_devnet
    job = shell_allocation("task", f"{roots_own_tool.name} --version")
    eid = h.dms.deployment.new(one_node_ensemble({"job": job})).ensemble_id
    h.wait_allocation(eid, "n1.job", "failed")
    stderr = h.dms.deployment.logs(eid, "job").stderr
    assert h.orchestrator(eid)._allocations["n1.job"].exit_code == 127
    assert (
        f"dmsgw devnet: {roots_own_tool.name} is {roots_own_tool} on this host, but the "
        f"allocation runs as uid"
    ) in stderr
    assert f"who cannot enter {roots_own_tool.parent}, so its shell did not find it" in stderr


def test_a_command_nobody_has_gets_no_such_hint(embedded_devnet: EmbeddedDevnet) -> None:
    h = embedded_devnet
    job = shell_allocation("task", "dmsgw-no-such-tool-anywhere")
    eid = h.dms.deployment.new(one_node_ensemble({"job": job})).ensemble_id
    h.wait_allocation(eid, "n1.job", "failed")
    assert "dmsgw devnet:" not in h.dms.deployment.logs(eid, "job").stderr
