"""What a container that requests and limits nothing gets: 0.5 CPU and 512 MiB unless the
operator configures otherwise (issue 26, item 7), from flags, the environment or the file."""

from __future__ import annotations

import pytest

from dmsgw import cli
from dmsgw.interlink.app import _pod_defaults
from dmsgw.interlink.capacity.resource_actor import GpuCatalog
from dmsgw.interlink.configuration.serve_config import load_config
from dmsgw.interlink.pods.pod_translation import Translator
from dmsgw.interlink.translate import TranslationOptions
from dmsgw.interlink.wire.bodies import RetrievedPodData

MIB = 1024 * 1024
POD = {
    "metadata": {"name": "bare", "namespace": "default", "uid": "u-defaults"},
    "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]},
}


async def _never() -> None:
    raise AssertionError("the catalog is not needed")


def _resources(defaults: TranslationOptions) -> tuple[float, int]:
    data = RetrievedPodData.model_validate({"pod": POD, "container": []})
    config = Translator(GpuCatalog(), _never, defaults=defaults)(data, 0)
    assert config.v1 is not None and config.v1.allocations is not None
    resources = config.v1.allocations["main"].resources
    return resources.cpu.cores, resources.ram.size


def test_by_default_half_a_core_and_512_mib() -> None:
    assert _resources(_pod_defaults(load_config(env={"DMSGW_DEVNET": "1"}))) == (0.5, 512 * MIB)
    assert _pod_defaults(load_config(env={"DMSGW_DEVNET": "1"})) == TranslationOptions()


def test_the_operator_sets_them() -> None:
    env = {"DMSGW_DEVNET": "1", "DMSGW_DEFAULT_CPU_CORES": "0.25"}
    config = load_config(env=env, flags={"default_memory_mib": "256"})
    assert _resources(_pod_defaults(config)) == (0.25, 256 * MIB)


@pytest.mark.parametrize(
    ("flag", "value"), [("--default-cpu-cores", "0"), ("--default-memory-mib", "lots")]
)
def test_a_default_that_is_no_amount_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: str, value: str
) -> None:
    monkeypatch.delenv("DMSGW_CONFIG", raising=False)
    assert cli.main(["serve", "--devnet", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dmsgw: error: {flag[2:].replace('-', '_')} (flag {flag}): ")
    assert err.count("\n") == 1
