"""The virtual node's capacity: the free resources of the reachable DMS peers, as one ping reply.

interLink (0.6.2+) applies the ``resources`` of our reply to ``GET /status []`` to the virtual
node. Kubernetes then schedules against the sum of what the peers have free, so:

* ``cpu`` is the sum of the peers' free cores, rounded down to the millicore (never promise more
  than there is); ``memory`` the sum of their free RAM in bytes; ``pods`` a configured maximum.
* GPUs are advertised twice: as ``nvidia.com/gpu`` (how most pods ask for "a GPU") and per GPU
  class as the NuNet design (seed ``000_ec49260dc4413ad0``) names them,
  ``nunet.gpu.<vendor>.<model>.<vram>gb`` — see :func:`gpu_class` for the exact normalisation.
* Nothing is invented: with no peer to count, the resources are left out (interLink then keeps
  the node as it is; a ``"0"`` would drain it, interLink#558). interLink never removes an
  accelerator it once saw, so a class advertised before and gone now is reported as ``"0"``
  (the caller passes what it advertised before).

Caveat for operators: Kubernetes accepts an extended resource in a pod only when its name is
domain-qualified (``example.com/x``); the seed's ``nunet.gpu.…`` is not, so pods cannot request
it by that name. :data:`QUALIFIED_GPU_PREFIX` (``nunet.io/gpu.``) is the Kubernetes-valid
spelling; both are understood by :func:`parse_gpu_resource_name`, and the prefix advertised is
the caller's choice (``gpu_resource_prefix`` in the gateway's configuration).

The same class names are the key of :func:`gpu_catalog`, which the pod translation uses to turn
a requested class back into the exact vendor and model the DMS reports.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable
from decimal import ROUND_DOWN, Decimal

from ...behaviors.resources import GPU, GPUVendor, Resources
from ...gojson import format_float32
from ..wire.apimachinery import format_quantity
from ..wire.bodies import AcceleratorResponse, PingResponse, ResourcesResponse

__all__ = [
    "GPU_RESOURCE_PREFIX",
    "NVIDIA_GPU_RESOURCE",
    "QUALIFIED_GPU_PREFIX",
    "consolidate_capacity",
    "gpu_catalog",
    "gpu_class",
    "gpu_resource_name",
    "parse_gpu_resource_name",
]

GPU_RESOURCE_PREFIX = "nunet.gpu."
"""The seed's spelling: ``nunet.gpu.nvidia.rtx.3080.10gb``."""
QUALIFIED_GPU_PREFIX = "nunet.io/gpu."
"""The Kubernetes-valid spelling of the same names: ``nunet.io/gpu.nvidia.rtx.3080.10gb``."""
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"

_GIB = 1 << 30
_MILLI = Decimal("0.001")

_VENDOR_TOKENS = {
    GPUVendor.NVIDIA: "nvidia",
    GPUVendor.AMD_ATI: "amd",
    GPUVendor.INTEL: "intel",
}
# Product lines that name their vendor when a peer reports a model without one (the seed's
# "Tesla P100-PCIE-16GB").
_LINE_VENDORS = {
    "tesla": GPUVendor.NVIDIA,
    "geforce": GPUVendor.NVIDIA,
    "quadro": GPUVendor.NVIDIA,
    "titan": GPUVendor.NVIDIA,
    "rtx": GPUVendor.NVIDIA,
    "gtx": GPUVendor.NVIDIA,
    "radeon": GPUVendor.AMD_ATI,
    "instinct": GPUVendor.AMD_ATI,
    "arc": GPUVendor.INTEL,
    "iris": GPUVendor.INTEL,
}
# Words of a model name that say nothing about the GPU class: vendor and company names, the
# consumer brand (the seed writes "rtx.3080", not "geforce.rtx.3080"), trademark marks, bus and
# form factor, and the word "graphics". Memory sizes are dropped too: the class has its own.
_NOISE_TOKENS = frozenset(
    {
        "nvidia",
        "amd",
        "ati",
        "intel",
        "corporation",
        "corp",
        "inc",
        "geforce",
        "r",
        "tm",
        "pcie",
        "pci",
        "sxm",
        "sxm2",
        "sxm3",
        "sxm4",
        "sxm5",
        "graphics",
    }
)
_MEMORY_TOKEN = re.compile(r"[0-9]+(?:g|gb|gib)")
_CLASS = re.compile(r"([a-z0-9]+)\.((?:[a-z0-9]+\.)*[a-z0-9]+)\.([0-9]+)gb")


def _vendor_token(gpu: GPU, model_tokens: list[str]) -> str:
    vendor = GPUVendor.parse(gpu.vendor or gpu.model)
    if vendor not in _VENDOR_TOKENS:
        vendor = next(
            (_LINE_VENDORS[t] for t in model_tokens if t in _LINE_VENDORS), GPUVendor.UNKNOWN
        )
    return _VENDOR_TOKENS.get(vendor, "unknown")


def gpu_class(gpu: GPU) -> str:
    """The class of a GPU, ``<vendor>.<model>.<vram>gb``: what a pod asks for.

    * vendor: ``nvidia``/``amd``/``intel`` from the reported vendor (the DMS's substring rule),
      else from the model's product line (``Tesla`` → nvidia), else ``unknown``;
    * model: the model name lower-cased and split at every character that is not a letter or a
      digit, without noise words (vendor, ``GeForce``, ``(R)``/``(TM)``, ``PCIe``/``SXMn``,
      ``Graphics``, memory sizes), joined with dots (``unknown`` if nothing is left);
    * vram: total VRAM in GiB, rounded to the nearest whole number (boards sold as "80 GB"
      often report a little less).

    ``NVIDIA GeForce RTX 3080`` with 10240 MiB is ``nvidia.rtx.3080.10gb``; ``Tesla
    P100-PCIE-16GB`` with 16384 MiB is ``nvidia.tesla.p100.16gb``.
    """
    tokens = [t for t in re.split(r"[^a-z0-9]+", gpu.model.lower()) if t]
    vendor = _vendor_token(gpu, tokens)
    model = [t for t in tokens if t not in _NOISE_TOKENS and not _MEMORY_TOKEN.fullmatch(t)]
    vram_gib = (gpu.vram + _GIB // 2) // _GIB
    return f"{vendor}.{'.'.join(model) or 'unknown'}.{vram_gib}gb"


def gpu_resource_name(gpu: GPU, prefix: str = GPU_RESOURCE_PREFIX) -> str:
    """The extended resource advertising ``gpu``'s class: ``nunet.gpu.nvidia.rtx.3080.10gb``."""
    return prefix + gpu_class(gpu)


def parse_gpu_resource_name(name: str) -> str | None:
    """The GPU class named by a NuNet GPU resource (either prefix), or ``None`` if ``name`` is
    not one. A bare class (``nvidia.rtx.3080.10gb``) is not a resource name."""
    for prefix in (GPU_RESOURCE_PREFIX, QUALIFIED_GPU_PREFIX):
        if name.startswith(prefix) and _CLASS.fullmatch(name[len(prefix) :]):
            return name[len(prefix) :]
    return None


def gpu_catalog(free: Iterable[Resources]) -> dict[str, GPU]:
    """One representative GPU per class among ``free``: what a pod translation asks the DMS for.

    The representative has the class's vendor and model exactly as a peer reports them (the
    first in sorted order when peers spell them differently) and the smallest VRAM seen, so that
    a request for it fits every card of the class.
    """
    catalog: dict[str, GPU] = {}
    cards = [g for resources in free for g in resources.gpus or ()]
    for card in sorted(cards, key=lambda g: (g.vendor, g.model, g.vram)):
        key = gpu_class(card)
        known = catalog.get(key)
        if known is None:
            catalog[key] = GPU(vendor=card.vendor, model=card.model, vram=card.vram)
        elif card.vram < known.vram:
            catalog[key] = dataclasses.replace(known, vram=card.vram)
    return catalog


def _cores(resources: Resources) -> Decimal:
    """The cores as the DMS meant them: a ``float32`` read back at its shortest (0.1, not
    0.100000001490116)."""
    return Decimal(format_float32(resources.cpu.cores))


def consolidate_capacity(
    free: Iterable[Resources],
    *,
    max_pods: int | None = None,
    advertised: Iterable[str] = (),
    gpu_prefix: str = GPU_RESOURCE_PREFIX,
) -> PingResponse:
    """The ping reply advertising the sum of ``free`` (one entry per reachable peer).

    ``advertised`` names the accelerators of earlier replies: any of them not present now is
    reported as ``"0"``, since interLink never drops an accelerator by itself. ``max_pods`` is
    left out when ``None``. With no peer at all nothing is known: only ``pods`` is reported.
    """
    peers = list(free)
    if not peers:
        resources = ResourcesResponse(pods=str(max_pods)) if max_pods is not None else None
        return PingResponse(status="ok", resources=resources)
    counts: Counter[str] = Counter({name: 0 for name in advertised})
    for peer in peers:
        for gpu in peer.gpus or ():
            kind = gpu_class(gpu)
            counts[gpu_prefix + kind] += 1
            if kind.startswith("nvidia."):
                counts[NVIDIA_GPU_RESOURCE] += 1
    cores = sum((_cores(peer) for peer in peers), Decimal(0))
    resources = ResourcesResponse(
        cpu=format_quantity(cores.quantize(_MILLI, rounding=ROUND_DOWN)),
        memory=format_quantity(sum(peer.ram.size for peer in peers), binary=True),
        pods=str(max_pods) if max_pods is not None else None,
        accelerators=[
            AcceleratorResponse(resource_type=name, available=str(counts[name]))
            for name in sorted(counts)
        ],
    )
    return PingResponse(status="ok", resources=resources)
