"""What can never run is refused at ``/create`` with a 4xx naming the pod, the field and the
limit, before anything is stored or deployed (issue 26, items 7 and 11; decision 072): ports
the DMS cannot forward, a variable Linux cannot hand to a program, more memory than a
machine has, more containers than a pod may have."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dmsgw.interlink.translate.env import MAX_ARG_STRLEN
from dmsgw.interlink.wire.parsing import MAX_CONTAINERS_PER_POD
from tests.support.fake_dms_plugin import fake_dms_plugin
from tests.support.gateway_fakes import FakeDMS, pod, uid


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[TestClient[Any, Any], FakeDMS]]:
    async with fake_dms_plugin(tmp_path) as opened:
        yield opened


def _body(**container: Any) -> str:
    return json.dumps({"pod": pod(uid(7), **container), "container": []})


@pytest.mark.parametrize(
    ("container", "status", "said"),
    [
        (
            {"ports": [{"containerPort": 53, "protocol": "UDP"}]},
            400,
            "spec.containers[0].ports[0].protocol: UDP is not forwarded",
        ),
        (
            {"ports": [{"containerPort": 80, "protocol": "SCTP"}]},
            400,
            "spec.containers[0].ports[0].protocol: SCTP is not forwarded",
        ),
        (
            {"ports": [{"containerPort": 80, "hostIP": "10.0.0.1"}]},
            400,
            "spec.containers[0].ports[0].hostIP: not supported",
        ),
        (
            {"ports": [{"containerPort": 80, "hostPort": 80}]},
            400,
            "spec.containers[0].ports[0].hostPort: must be within 16384-65535",
        ),
        (
            {"env": [{"name": "BIG", "value": "x" * (1 << 20)}]},
            400,
            f"spec.containers[0].env[0] (BIG): 1048581 bytes as NAME=value; Linux runs no "
            f"program with a variable over {MAX_ARG_STRLEN} bytes",
        ),
        (
            {"resources": {"limits": {"memory": "1Ei"}}},
            400,
            "spec.containers[0].resources: memory 1152921504606846976 bytes is more than any "
            "machine has (at most 4 PiB",
        ),
    ],
)
async def test_what_can_never_run_is_refused_at_create(
    setup: tuple[TestClient[Any, Any], FakeDMS], container: dict[str, Any], status: int, said: str
) -> None:
    client, dms = setup
    answer = await client.post("/create", data=_body(**container))
    text = await answer.text()
    assert (answer.status, said in text) == (status, True), text
    assert text.startswith(f"pod default/p-{uid(7)[-4:]}: ")
    assert "\n" not in text.strip()
    assert dms.asked["deployment/new"] == 0
    polled = await client.post("/status", data=json.dumps([pod(uid(7))]))
    (entry,) = await polled.json()
    assert entry["containers"][0]["state"]["terminated"]["reason"] != "ProviderFailed"


async def test_a_variable_just_within_linux_limit_is_taken(
    setup: tuple[TestClient[Any, Any], FakeDMS],
) -> None:
    client, _ = setup
    value = "x" * (MAX_ARG_STRLEN - len("BIG=") - 1)
    answer = await client.post("/create", data=_body(env=[{"name": "BIG", "value": value}]))
    assert answer.status == 200, await answer.text()


async def test_a_pod_with_more_containers_than_the_limit_is_refused_with_413(
    setup: tuple[TestClient[Any, Any], FakeDMS],
) -> None:
    client, dms = setup
    spec = pod(uid(8))
    main = spec["spec"]["containers"][0]
    spec["spec"]["containers"] = [{**main, "name": f"c{i}"} for i in range(10_000)]
    answer = await client.post("/create", data=json.dumps({"pod": spec, "container": []}))
    assert answer.status == 413
    assert await answer.text() == (
        f"pod.spec: 10000 containers (init and main); a pod may have at most "
        f"{MAX_CONTAINERS_PER_POD}"
    )
    spec["spec"]["containers"] = spec["spec"]["containers"][:MAX_CONTAINERS_PER_POD]
    answer = await client.post("/create", data=json.dumps({"pod": spec, "container": []}))
    assert answer.status == 200, await answer.text()
    assert dms.asked["deployment/new"] <= 1
