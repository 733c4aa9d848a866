"""Gateways of their own on the embedded devnet (their own key, capability grant and state), and
one serving its plugin API and operator port as ``dmsgw serve`` does: what the tests of two
gateways on one DMS, of endpoints and of pods' containment need."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.netns import AllocationNamespace
from dmsgw.interlink.app import start_backend
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.reports.pod_report import PodReport
from dmsgw.interlink.reports.pod_usage import UsageBook
from dmsgw.interlink.server import Health, Metrics, PluginServer, Pods, operator_app
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context
from tests.support.gateway_fakes import FAST, until, until_async

Client = TestClient[Any, Any]


def gateway_config(devnet: Devnet, tmp: Path, seed: int, *, grant_s: float | None = None) -> Any:
    """Key and capability files for a gateway of its own on ``devnet`` (its grant lasting
    ``grant_s``, by default the devnet's year), and its config."""
    key = Ed25519PrivKey(bytes(range(seed, seed + 32)))
    keys, caps = tmp / "key", tmp / "cap"
    KeyStore(keys).save("gw", marshal_private_key(key), "pw")
    caps.mkdir(parents=True)
    lasting = {} if grant_s is None else {"duration_s": grant_s}
    grant = devnet.grant(DID.from_public_key(key.public_key()), ["/dms/node"], **lasting)
    save_context(
        CapabilityContext(provider_from_private_key(key), name="gw", provide=grant), directory=caps
    )
    return load_config(
        env={
            "DMS_PASSPHRASE": "pw",
            "DMSGW_DMS_URL": devnet.urls[0],
            "DMSGW_KEY_NAME": "gw",
            "DMSGW_KEY_DIR": str(keys),
            "DMSGW_CAP_CONTEXT": "gw",
            "DMSGW_CAP_DIR": str(caps),
            "DMSGW_STATE_PATH": str(tmp / "state.sqlite3"),
        }
    )


PYTHON = shutil.which("python3", path="/usr/bin")
needs_python = pytest.mark.skipif(PYTHON is None, reason="needs /usr/bin/python3")


async def no_dms(*_: Any, **__: Any) -> Any:
    """A DMS the usage of a pod is never asked of (a report that must not measure)."""
    raise AssertionError("a pod without a snapshot is not measured")


def gateway_pods(gateway: Gateway) -> Pods:
    """The operator port's ``/pods`` serving ``gateway``'s report, as ``dmsgw serve`` wires it."""
    assert gateway.pod_report is not None
    pods = Pods()
    pods.serving(gateway.pod_report)
    return pods


def pod_view(gateway: Gateway, namespace: str, name: str) -> dict[str, Any]:
    """The gateway's view of a pod, as ``GET /pods/{namespace}/{name}`` shows it."""
    view = PodReport(gateway.pods, UsageBook(no_dms)).view(namespace, name)
    assert view is not None, f"no pod {namespace}/{name}"
    return view


NAMESPACES_POSSIBLE = os.geteuid() == 0 and shutil.which("ip") is not None
needs_namespaces = pytest.mark.skipif(
    not NAMESPACES_POSSIBLE,
    reason="network namespaces need root and ip (iproute2); the shared network is tested below",
)


class Serving:
    """A gateway on the embedded devnet, with its plugin API and its operator port."""

    def __init__(self, devnet: Devnet, gateway: Gateway, plugin: Client, operator: Client):
        self.devnet, self.gateway, self.plugin, self.operator = devnet, gateway, plugin, operator

    async def create(self, spec: dict[str, Any]) -> None:
        body = json.dumps({"pod": spec, "container": [{"name": "main"}]})
        assert (await self.plugin.post("/create", data=body)).status == 200

    async def state(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The pod's container state, as ``/status`` reports it."""
        (status,) = await (await self.plugin.get("/status", data=json.dumps([spec]))).json()
        return dict(status["containers"][0]["state"])

    async def endpoint(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The pod's one endpoint, from the operator port, once it runs."""

        async def running() -> bool:
            return bool((await self.state(spec)).get("running"))

        name = spec["metadata"]["name"]
        await until_async(running, f"{name} runs")
        await until(lambda: bool(pod_view(self.gateway, "default", name)["endpoints"]), "endpoint")
        view = await (await self.operator.get(f"/pods/default/{name}")).json()
        assert view["node"] and view["peer"]  # where it runs is known while it runs
        (endpoint,) = view["endpoints"]
        return dict(endpoint)

    def namespace(self, spec: dict[str, Any]) -> AllocationNamespace:
        """The network namespace of the pod's allocation."""
        ensemble = self.gateway.book.records[spec["metadata"]["uid"]].ensemble_id
        namespace = self.devnet.networks.namespace(f"{ensemble}_pod.main")
        assert namespace is not None
        return namespace

    def health(self, spec: dict[str, Any]) -> str:
        """The health of the pod's allocation, as the devnet's orchestrator has it."""
        ensemble = self.gateway.book.records[spec["metadata"]["uid"]].ensemble_id
        deployments = self.devnet.nodes[0].deployments
        assert deployments is not None
        orchestrator = deployments.orchestrators.get(ensemble)
        infos = orchestrator.allocation_info().values() if orchestrator is not None else ()
        return next((info.health for info in infos), "")


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **devnet_options: Any) -> AsyncIterator[Serving]:
    """A devnet (with ``devnet_options``) and a gateway of its own serving on it."""
    devnet = Devnet(seed="endpoints", **devnet_options)
    await devnet.start()
    config = gateway_config(devnet, tmp_path / "gw", seed=170)
    gateway = await start_backend(config, metrics=Metrics(process=False), policy=FAST)
    plugin = TestClient(
        TestServer(PluginServer(gateway, config.server_options(), Metrics(process=False)).app()),
        headers={"Content-Type": "application/json"},
    )
    operator = TestClient(
        TestServer(operator_app(Health(), Metrics(process=False), pods=gateway_pods(gateway)))
    )
    await plugin.start_server()
    await operator.start_server()
    try:
        yield Serving(devnet, gateway, plugin, operator)
    finally:
        await plugin.close()
        await operator.close()
        await gateway.close()
        await devnet.stop()
