"""The DMS behaviors the gateway speaks: catalog, payload models, ensembles, resources, status.

Everything here is a plain model or a pure function (no I/O besides reading ensemble files),
shared by the gateway's client and its simulated DMS. The main names are re-exported; the
payload models live in one module per DMS behavior group (:mod:`.peers`, :mod:`.deployment`,
:mod:`.onboarding`, :mod:`.node_resources`, :mod:`.allocations`, :mod:`.public`,
:mod:`.cap_anchors`, :mod:`.volume`, :mod:`.logger`).
"""

from .catalog import (
    BY_NAMESPACE,
    CATALOG,
    Behavior,
    BehaviorPayloadError,
    UnknownBehaviorError,
    WireModel,
    get_behavior,
)
from .ensemble import (
    AllocationConfig,
    AllocationKey,
    ContractConfig,
    EdgeConstraint,
    EnsembleConfig,
    EnsembleConfigV1,
    HealthCheckManifest,
    Location,
    LocationConstraints,
    NodeConfig,
    PortConfig,
    SpecConfig,
    SubnetConfig,
    SupervisorConfig,
    VolumeConfig,
)
from .ensemble_validation import (
    EnsembleError,
    EnsembleValidationError,
    Problem,
    check_ensemble,
    validate_ensemble,
)
from .ensemble_yaml import EnsembleYamlError, load_ensemble_yaml, parse_ensemble_yaml
from .resources import CPU, GPU, RAM, Disk, ResourceError, Resources
from .status import DeploymentStatus, EnsembleManifest, is_terminal

__all__ = [
    "BY_NAMESPACE",
    "CATALOG",
    "CPU",
    "GPU",
    "RAM",
    "AllocationConfig",
    "AllocationKey",
    "Behavior",
    "BehaviorPayloadError",
    "ContractConfig",
    "DeploymentStatus",
    "Disk",
    "EdgeConstraint",
    "EnsembleConfig",
    "EnsembleConfigV1",
    "EnsembleError",
    "EnsembleManifest",
    "EnsembleValidationError",
    "EnsembleYamlError",
    "HealthCheckManifest",
    "Location",
    "LocationConstraints",
    "NodeConfig",
    "PortConfig",
    "Problem",
    "ResourceError",
    "Resources",
    "SpecConfig",
    "SubnetConfig",
    "SupervisorConfig",
    "UnknownBehaviorError",
    "VolumeConfig",
    "WireModel",
    "check_ensemble",
    "get_behavior",
    "is_terminal",
    "load_ensemble_yaml",
    "parse_ensemble_yaml",
    "validate_ensemble",
]
