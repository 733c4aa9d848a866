"""A one-node embedded devnet deploys onto itself, as a lone DMS does: its orchestrator's bid
request reaches its own provider, which bids, and the deployment runs there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmsgw.devnet.pytest_plugin import (
    EmbeddedDevnet,
    one_node_ensemble,
    shell_allocation,
    start_embedded,
)


@pytest.fixture(scope="module")
def single_devnet() -> Iterator[EmbeddedDevnet]:
    handle = start_embedded(1, seed="pytest-single")
    try:
        yield handle
    finally:
        handle.close()


def test_a_one_node_devnet_deploys_a_task_to_completed(single_devnet: EmbeddedDevnet) -> None:
    dms = single_devnet.dms
    assert not (dms.peers.list().peers or ())
    reply = dms.deployment.new(one_node_ensemble({"a": shell_allocation("task", "echo hi")}))
    eid = reply.ensemble_id
    assert single_devnet.wait_status(eid, "Completed", "Failed") == "Completed"
    manifest = dms.deployment.manifest(eid).manifest
    assert (manifest.nodes or {})["n1"].peer == dms.peers.self().id
    node = single_devnet.devnet.nodes[0].node
    assert not node.dropped
