"""interLink's networking annotations, read and checked: the tunnel that exposes the pod's
ports, the pod's IP, and the script interLink runs before the pod.

interLink's virtual kubelet (``Network.EnableTunnel``) starts a wstunnel server in the cluster
for a pod with ports and writes the client's command line into
:data:`TUNNEL_ANNOTATION` (``curl … && ./wstunnel client -R tcp://0.0.0.0:<port>:localhost:<port>
… ws://<ingress>:80 &``); a plugin runs it beside the pod so that the cluster's Service reaches
the pod. The client forwards to ``localhost``, and the DMS runs each container in an allocation
(a network namespace) of its own, so the tunnel runs in the wrapper of the one container whose
ports it reaches (:func:`tunnel_container`). :data:`POD_IP_ANNOTATION` is the address interLink
gave the pod (``POD_IP``); :data:`PRE_EXEC_ANNOTATION` is a script run before the pod, which
in interLink's full-mesh mode carries a WireGuard mesh script the DMS cannot run
(:data:`MESH_HEREDOC`). Pure: each refusal names the annotation.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json

from ..wire import k8s
from .checks import PodTranslationError
from .inputs import Container

TUNNEL_ANNOTATION = "interlink.eu/wstunnel-client-commands"
"""The shell commands that open the pod's tunnel to its wstunnel server in the cluster."""
POD_IP_ANNOTATION = "interlink.eu/pod-ip"
"""The pod's address as interLink gave it (a VPN pod's, or the wstunnel server's)."""
PRE_EXEC_ANNOTATION = "slurm-job.vk.io/pre-exec"
"""A shell script interLink's plugins run before the pod's containers."""
MESH_ANNOTATION = "interlink.eu/mesh-network"
"""``disabled`` opts a pod out of interLink's full mesh (its VK then writes a tunnel instead)."""
MESH_HEREDOC = "cat <<'EOFMESH'"
"""How interLink's full-mesh script starts inside :data:`PRE_EXEC_ANNOTATION`."""
MAX_SCRIPT_BYTES = 64 * 1024
"""The most an annotation's script may hold: it travels inside the wrapper, one argument
of the container's command, which Linux caps at ``MAX_ARG_STRLEN`` (``128 KiB``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PodNetwork:
    """What the pod's annotations ask of its containers: ``tunnel`` (commands) run beside
    ``tunnel_container``; ``pod_ip`` exported as ``POD_IP``; ``pre_exec`` run before each
    command."""

    tunnel: str = ""
    tunnel_container: str = ""
    pod_ip: str = ""
    pre_exec: str = ""


NO_NETWORK = PodNetwork()
"""A pod without networking annotations."""


def _where(key: str) -> str:
    return f"metadata.annotations[{json.dumps(key)}]"


def _script(pod: k8s.Pod, key: str) -> str:
    """The annotation's shell script (``""`` when absent), refused when it cannot run."""
    text = pod.metadata.annotations.get(key)
    if text is None:
        return ""
    if not text.strip():
        raise PodTranslationError(_where(key), "is empty: give the commands, or leave it out")
    if "\x00" in text:
        raise PodTranslationError(_where(key), "a shell script cannot hold a NUL character")
    if (size := len(text.encode())) > MAX_SCRIPT_BYTES:
        raise PodTranslationError(
            _where(key), f"{size} bytes; the gateway runs at most {MAX_SCRIPT_BYTES}"
        )
    return text


def annotated_pod_ip(pod: k8s.Pod) -> str:
    """The pod's address in :data:`POD_IP_ANNOTATION` (``""``: none), which also answers
    ``fieldRef: status.podIP``, as interLink's API sets it as the pod's IP."""
    given = pod.metadata.annotations.get(POD_IP_ANNOTATION)
    if given is None:
        return ""
    try:
        return str(ipaddress.ip_address(given.strip()))
    except ValueError:
        raise PodTranslationError(
            _where(POD_IP_ANNOTATION), f"{given[:64]!r} is not an IP address"
        ) from None


def tunnel_container(containers: list[Container]) -> Container:
    """The container whose wrapper runs the tunnel: the main container that declares ports
    (the first one when none does: the ports are then interLink's extra ports). The client
    reaches ``localhost`` only, so two containers with ports cannot share one tunnel."""
    mains = [c for c in containers if c.init_index is None]
    with_ports = [c for c in mains if c.spec.ports]
    if len(with_ports) > 1:
        names = ", ".join(repr(c.spec.name) for c in with_ports)
        raise PodTranslationError(
            _where(TUNNEL_ANNOTATION),
            f"containers {names} declare ports, but the tunnel forwards to localhost and the "
            "DMS runs each container in a network of its own: one tunnel reaches one "
            "container's ports; move the ports into one container",
        )
    return (with_ports or mains)[0]


def _check_pre_exec(script: str) -> None:
    if MESH_HEREDOC in script:
        raise PodTranslationError(
            _where(PRE_EXEC_ANNOTATION),
            "interLink's full-mesh script needs /dev/net/tun, user and network namespaces "
            "and downloads, which the gateway's unprivileged DMS containers do not give; "
            "annotate the pod "
            f"{MESH_ANNOTATION}: disabled (its port tunnel then runs) or turn the virtual "
            "kubelet's Network.FullMesh off",
        )


def check_wrapped(network: PodNetwork, c: Container, wrapped: bool) -> None:
    """The tunnel and the pre-exec script run in the wrapper: its container must have one."""
    if wrapped:
        return
    for key, needed in (
        (TUNNEL_ANNOTATION, network.tunnel_container == c.spec.name),
        (PRE_EXEC_ANNOTATION, bool(network.pre_exec)),
    ):
        if needed:
            raise PodTranslationError(
                _where(key),
                f"runs in the gateway's wrapper of container {c.spec.name!r}, which needs a "
                "command (the image's own entrypoint cannot be wrapped) and must not be "
                "listed as unwrapped",
            )


def pod_network(pod: k8s.Pod, containers: list[Container]) -> PodNetwork:
    """The pod's networking annotations, checked; the tunnel's container chosen."""
    tunnel = _script(pod, TUNNEL_ANNOTATION)
    pre_exec = _script(pod, PRE_EXEC_ANNOTATION)
    _check_pre_exec(pre_exec)
    chosen = tunnel_container(containers).spec.name if tunnel else ""
    return PodNetwork(tunnel, chosen, annotated_pod_ip(pod), pre_exec)
