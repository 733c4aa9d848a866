"""Where a pod may run: a pinned peer, excluded peers, and the GPU type its selector requires.

Annotation :data:`PEER_ANNOTATION` pins the node to a peer and :data:`EXCLUDE_PEERS_ANNOTATION`
excludes peers; a GPU type required through a node selector or required node affinity on
:data:`GPU_TYPE_LABELS` fixes the class of the pod's GPUs. Other selector and affinity terms only
choose the virtual node and were satisfied by the Kubernetes scheduler.
"""

from __future__ import annotations

import json

from ...keys.peer import PeerIDError, parse_peer_id
from ..capacity.node_capacity import parse_gpu_resource_name
from ..wire import k8s
from .checks import PodTranslationError

PEER_ANNOTATION = "nunet.io/peer"
"""Pod annotation: the peer ID (``12D3KooW…``) the pod must run on."""
EXCLUDE_PEERS_ANNOTATION = "nunet.io/exclude-peers"
"""Pod annotation: comma-separated peer IDs the pod must not run on."""
GPU_TYPE_LABELS = ("gpu-type", "nunet.io/gpu-type")
"""Node-selector / node-affinity keys whose value is a GPU class (``nunet.gpu.nvidia.v100.40gb``
as in the seed, ``nunet.io/gpu.…``, or the bare class) that the pod's GPUs must be."""


def gpu_type(spec: k8s.PodSpec) -> tuple[str, str] | None:
    """The GPU class required by selector or affinity, with the path that requires it."""
    found: list[tuple[str, str]] = []
    for key in GPU_TYPE_LABELS:
        if key in spec.node_selector:
            path = f"spec.nodeSelector[{json.dumps(key)}]"
            found.append((_gpu_class_label(spec.node_selector[key], path), path))
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    terms = required.node_selector_terms if required else []
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    typed = [
        i for i, t in enumerate(terms) if any(e.key in GPU_TYPE_LABELS for e in t.match_expressions)
    ]
    if len(typed) > 1 or (typed and len(terms) > 1):
        raise PodTranslationError(
            f"{base}.nodeSelectorTerms",
            "alternative terms on the GPU type are not supported: require one GPU type",
        )
    for i in typed:
        for j, expression in enumerate(terms[i].match_expressions):
            if expression.key not in GPU_TYPE_LABELS:
                continue
            path = f"{base}.nodeSelectorTerms[{i}].matchExpressions[{j}]"
            if expression.operator != "In" or len(expression.values) != 1:
                raise PodTranslationError(
                    path, "a GPU type must be required as `In` with exactly one value"
                )
            found.append((_gpu_class_label(expression.values[0], f"{path}.values[0]"), path))
    classes = {cls for cls, _ in found}
    if len(classes) > 1:
        raise PodTranslationError(found[1][1], f"conflicts with the GPU type of {found[0][1]}")
    return found[0] if found else None


def _gpu_class_label(value: str, path: str) -> str:
    cls = parse_gpu_resource_name(value) or parse_gpu_resource_name("nunet.gpu." + value)
    if cls is None:
        raise PodTranslationError(
            path, f"{value!r} is not a GPU type such as nunet.gpu.nvidia.rtx.3080.10gb"
        )
    return cls


def _peer_ids(value: str, path: str) -> tuple[str, ...]:
    peers: list[str] = []
    for item in value.split(","):
        peer = item.strip()
        if not peer or peer in peers:
            continue
        try:
            parse_peer_id(peer)
        except PeerIDError as exc:
            raise PodTranslationError(path, str(exc)) from None
        peers.append(peer)
    return tuple(peers)


def peer_placement(pod: k8s.Pod) -> tuple[str, tuple[str, ...]]:
    annotations = pod.metadata.annotations
    peer_path = f"metadata.annotations[{json.dumps(PEER_ANNOTATION)}]"
    exclude_path = f"metadata.annotations[{json.dumps(EXCLUDE_PEERS_ANNOTATION)}]"
    pinned = _peer_ids(annotations.get(PEER_ANNOTATION, ""), peer_path)
    if len(pinned) > 1:
        raise PodTranslationError(
            peer_path, "name one peer (use nunet.io/exclude-peers to avoid others)"
        )
    excluded = _peer_ids(annotations.get(EXCLUDE_PEERS_ANNOTATION, ""), exclude_path)
    if pinned and pinned[0] in excluded:
        raise PodTranslationError(exclude_path, f"excludes the pinned peer {pinned[0]}")
    return (pinned[0] if pinned else ""), excluded
