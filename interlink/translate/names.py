"""The names the translation writes into an ensemble and the PodActor reads back from it.

The node and allocation keys, the pod's control volume where init containers mark their
completion, and the metadata keys that carry the pod's identity and policy.
"""

from __future__ import annotations

POD_NODE = "pod"
"""The ensemble's only node; allocations are keyed ``pod.<container>`` in manifests."""


def allocation_key(container: str) -> str:
    """The manifest key of a container's allocation (what ``deployment/logs`` is asked for)."""
    return f"{POD_NODE}.{container}"


CONTROL_MOUNT = "/.dmsgw"
"""Where every container of a pod with init containers sees the pod's control volume."""
INIT_FAILED = f"{CONTROL_MOUNT}/init-failed"
"""Written by an init container's wrapper when its command fails: the name of that container."""


def completion_marker(name: str) -> str:
    """The file an init container's wrapper creates when its command exits 0."""
    return f"{CONTROL_MOUNT}/{name}.done"


METADATA_POD_UID = "dmsgw.io/pod-uid"
METADATA_POD_NAMESPACE = "dmsgw.io/pod-namespace"
METADATA_POD_NAME = "dmsgw.io/pod-name"
METADATA_RESTART_POLICY = "dmsgw.io/restart-policy"
METADATA_GENERATION = "dmsgw.io/generation"
METADATA_GRACE_PERIOD = "dmsgw.io/termination-grace-period-seconds"
METADATA_ACTIVE_DEADLINE = "dmsgw.io/active-deadline-seconds"
METADATA_PROBES_PREFIX = "dmsgw.io/probes."
"""``dmsgw.io/probes.<container>``: the container's probes as compact JSON,
``{"liveness": {"handler": …, "initialDelaySeconds": …, …}, …, "runner": "wrapper"}``, where
``runner`` says who runs them: the pod wrapper, or the DMS (an unwrapped container's liveness
probe, as its health check)."""

TOOLS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Where the gateway's own scripts find their tools (``sleep``, ``mkdir``, an HTTP client for
probes), whatever ``PATH`` the container declares, as the kubelet's own work does not depend
on it: an image's usual directories."""
