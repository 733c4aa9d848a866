"""``dmsgw.interlink.capacity.node_capacity``: the ping reply consolidating the free resources of
DMS peers.

The GPU class names are checked against the examples of NuNet's design (seed
``000_ec49260dc4413ad0.txt``): its ``dht/dump`` peers consolidate into
``nunet.gpu.nvidia.tesla.p100.16gb``, ``nunet.gpu.nvidia.rtx.3080.10gb`` and
``nunet.gpu.nvidia.rtx.3090.24gb``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmsgw.behaviors.resources import CPU, GPU, RAM, Resources
from dmsgw.interlink.capacity.node_capacity import (
    GPU_RESOURCE_PREFIX,
    NVIDIA_GPU_RESOURCE,
    QUALIFIED_GPU_PREFIX,
    consolidate_capacity,
    gpu_catalog,
    gpu_class,
    gpu_resource_name,
    parse_gpu_resource_name,
)
from dmsgw.interlink.wire.bodies import PingResponse

MIB = 1 << 20
GIB = 1 << 30


def card(model: str, vram_mib: int, vendor: str = "") -> GPU:
    return GPU(vendor=vendor, model=model, vram=vram_mib * MIB)


def seed_peers() -> list[Resources]:
    """The three peers of the seed's ``/api/v1/peers/dht/dump`` reply (RAM in MiB, GPUs as
    ``gpu_info`` gives them: a name, no vendor)."""
    return [
        Resources(cpu=CPU(cores=1), ram=RAM(size=4000 * MIB)),
        Resources(gpus=(card("Tesla P100-PCIE-16GB", 16384),) * 3),
        Resources(
            cpu=CPU(cores=17),
            ram=RAM(size=113855 * MIB),
            gpus=(
                card("NVIDIA GeForce RTX 3080", 10240),
                card("NVIDIA GeForce RTX 3090", 24576),
                card("NVIDIA GeForce RTX 3090", 24576),
                card("NVIDIA GeForce RTX 3080", 10240),
                card("NVIDIA GeForce RTX 3080", 10240),
                card("NVIDIA GeForce RTX 3080", 10240),
            ),
        ),
    ]


# --- GPU classes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        # the seed's examples
        (card("Tesla P100-PCIE-16GB", 16384), "nvidia.tesla.p100.16gb"),
        (card("NVIDIA GeForce RTX 3080", 10240), "nvidia.rtx.3080.10gb"),
        (card("NVIDIA GeForce RTX 3090", 24576), "nvidia.rtx.3090.24gb"),
        # as a DMS reports them (vendor given)
        (card("NVIDIA GeForce RTX 3080", 10240, "NVIDIA"), "nvidia.rtx.3080.10gb"),
        (card("Tesla V100-SXM2-32GB", 32768, "NVIDIA"), "nvidia.tesla.v100.32gb"),
        # VRAM rounds to the nearest GiB: an "80 GB" board reporting a little less
        (card("NVIDIA A100 80GB PCIe", 81559, "NVIDIA"), "nvidia.a100.80gb"),
        (card("NVIDIA H100 NVL", 95830, "NVIDIA"), "nvidia.h100.nvl.94gb"),
        (card("AMD Radeon RX 7900 XTX", 24560, "AMD/ATI"), "amd.radeon.rx.7900.xtx.24gb"),
        (card("Radeon Instinct MI100", 32768), "amd.radeon.instinct.mi100.32gb"),
        (card("Intel(R) Arc(TM) A770 Graphics", 16384, "Intel"), "intel.arc.a770.16gb"),
        (card("", 8192, "NVIDIA"), "nvidia.unknown.8gb"),
        (card("Mystery Accelerator", 4096), "unknown.mystery.accelerator.4gb"),
    ],
)
def test_gpu_class(gpu: GPU, expected: str) -> None:
    assert gpu_class(gpu) == expected
    assert parse_gpu_resource_name(GPU_RESOURCE_PREFIX + expected) == expected
    assert parse_gpu_resource_name(QUALIFIED_GPU_PREFIX + expected) == expected


def test_gpu_resource_name_uses_the_seed_prefix_by_default() -> None:
    gpu = card("NVIDIA GeForce RTX 3080", 10240)
    assert gpu_resource_name(gpu) == "nunet.gpu.nvidia.rtx.3080.10gb"
    assert gpu_resource_name(gpu, QUALIFIED_GPU_PREFIX) == "nunet.io/gpu.nvidia.rtx.3080.10gb"


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "nvidia.rtx.3080.10gb",  # a bare class is not a resource name
        "nunet.gpu.nvidia.rtx.3080",  # no VRAM
        "nunet.gpu.nvidia.10gb",  # no model
        "nunet.gpu.NVIDIA.rtx.3080.10gb",  # classes are lower case
        "nunet.gpu.nvidia.rtx 3080.10gb",
        "nunet.gpu.",
        "cpu",
    ],
)
def test_parse_gpu_resource_name_refuses_other_names(name: str) -> None:
    assert parse_gpu_resource_name(name) is None


@given(
    st.text(max_size=40),
    st.sampled_from(["", "NVIDIA", "AMD/ATI", "Intel", "Matrox"]),
    st.integers(0, 1 << 40),
)
def test_every_gpu_class_is_a_parsable_resource_name(model: str, vendor: str, vram: int) -> None:
    gpu = GPU(vendor=vendor, model=model, vram=vram)
    assert parse_gpu_resource_name(gpu_resource_name(gpu)) == gpu_class(gpu)


def test_gpu_catalog_keeps_the_reported_model_and_the_smallest_vram() -> None:
    free = [
        Resources(gpus=(card("NVIDIA A100 80GB PCIe", 81920, "NVIDIA"),)),
        Resources(gpus=(card("NVIDIA A100 80GB PCIe", 81559, "NVIDIA"),)),
        *seed_peers(),
    ]
    catalog = gpu_catalog(free)
    assert sorted(catalog) == [
        "nvidia.a100.80gb",
        "nvidia.rtx.3080.10gb",
        "nvidia.rtx.3090.24gb",
        "nvidia.tesla.p100.16gb",
    ]
    assert catalog["nvidia.a100.80gb"] == GPU(
        vendor="NVIDIA", model="NVIDIA A100 80GB PCIe", vram=81559 * MIB
    )
    assert catalog["nvidia.rtx.3080.10gb"].model == "NVIDIA GeForce RTX 3080"


# --- the ping reply --------------------------------------------------------------------------


def test_the_seed_peers_consolidate_as_the_design_names_them() -> None:
    reply = consolidate_capacity(seed_peers(), max_pods=110)
    # The seed lists "rtx.3080.10gb x5", but its peer has four RTX 3080s (and two 3090s).
    assert reply.to_wire() == {
        "status": "ok",
        "resources": {
            "cpu": "18",
            "memory": "117855Mi",
            "pods": "110",
            "accelerators": [
                {"resourceType": "nunet.gpu.nvidia.rtx.3080.10gb", "available": "4"},
                {"resourceType": "nunet.gpu.nvidia.rtx.3090.24gb", "available": "2"},
                {"resourceType": "nunet.gpu.nvidia.tesla.p100.16gb", "available": "3"},
                {"resourceType": "nvidia.com/gpu", "available": "9"},
            ],
        },
    }
    assert PingResponse.model_validate(reply.to_wire()) == reply


def test_cpu_is_rounded_down_to_the_millicore_and_memory_stays_exact() -> None:
    free = [
        Resources(cpu=CPU(cores=0.1), ram=RAM(size=GIB)),
        Resources(cpu=CPU(cores=0.2), ram=RAM(size=1000)),
        Resources(cpu=CPU(cores=0.3333), ram=RAM(size=0)),
    ]
    resources = consolidate_capacity(free).resources
    assert resources is not None
    assert resources.cpu == "633m"
    assert resources.memory == "1073742824"
    assert resources.pods is None  # not configured: left out, not "0"


def test_peers_with_nothing_free_report_zero() -> None:
    resources = consolidate_capacity([Resources()]).resources
    assert resources is not None
    assert (resources.cpu, resources.memory, resources.accelerators) == ("0", "0", [])


def test_without_peers_nothing_is_known_and_nothing_is_drained() -> None:
    assert consolidate_capacity([]).to_wire() == {"status": "ok"}
    assert consolidate_capacity([], max_pods=50, advertised=[NVIDIA_GPU_RESOURCE]).to_wire() == {
        "status": "ok",
        "resources": {"pods": "50"},
    }


def test_a_gpu_class_that_is_gone_is_reported_as_zero() -> None:
    """interLink only adds and updates accelerators: one that disappears must be zeroed."""
    before = consolidate_capacity(seed_peers()).resources
    assert before is not None
    advertised = [a.resource_type for a in before.accelerators]
    after = consolidate_capacity(seed_peers()[:2], advertised=advertised).resources
    assert after is not None
    assert {a.resource_type: a.available for a in after.accelerators} == {
        "nunet.gpu.nvidia.rtx.3080.10gb": "0",
        "nunet.gpu.nvidia.rtx.3090.24gb": "0",
        "nunet.gpu.nvidia.tesla.p100.16gb": "3",
        "nvidia.com/gpu": "3",
    }


def test_only_nvidia_gpus_count_as_nvidia_com_gpu() -> None:
    free = [
        Resources(
            gpus=(
                card("AMD Radeon RX 7900 XTX", 24560, "AMD/ATI"),
                card("NVIDIA GeForce RTX 3080", 10240, "NVIDIA"),
            )
        )
    ]
    resources = consolidate_capacity(free, gpu_prefix=QUALIFIED_GPU_PREFIX).resources
    assert resources is not None
    assert [(a.resource_type, a.available) for a in resources.accelerators] == [
        ("nunet.io/gpu.amd.radeon.rx.7900.xtx.24gb", "1"),
        ("nunet.io/gpu.nvidia.rtx.3080.10gb", "1"),
        ("nvidia.com/gpu", "1"),
    ]


def test_the_reply_is_deterministic() -> None:
    peers = seed_peers()
    first = json.dumps(consolidate_capacity(peers).to_wire())
    assert json.dumps(consolidate_capacity(list(reversed(peers))).to_wire()) == first
