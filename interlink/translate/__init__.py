"""A Kubernetes pod, as interLink hands it over, translated into a DMS ensemble.

A pure function: :func:`pod_to_ensemble` reads the ``/create`` body (the pod and the ConfigMaps,
Secrets and projected maps interLink fetched for it) and returns the ensemble to deploy, or
raises :class:`PodTranslationError` naming the first field it cannot honour
(``spec.volumes[2] (nfs): volume kind not supported``). Nothing is dropped silently: a field
either changes what the DMS runs, is recorded in the ensemble for the executor or the PodActor
to apply, has no effect once the Kubernetes scheduler has placed the pod on our virtual node,
or is refused. The same input always gives byte-identical ensemble JSON, and every ensemble
returned passes :func:`~dmsgw.behaviors.ensemble_validation.validate_ensemble`.

How a pod maps (each DMS feature the executor must honour is described in the module that
makes it):

* **One node** (``pod``) holds one allocation per container, named after it (container names
  are DNS labels, as allocation names must be). Init containers are ``task`` allocations;
  main containers are ``task``\\s, or ``service``\\s under ``restartPolicy: Always``
  (:mod:`.pod_ensemble`).
* **Order.** The DMS's ``depends_on`` only orders *starts*, while Kubernetes runs each init
  container to completion first. So each init container depends on the previous one and every
  main container on the last; on top of that a container waits, in its provision script, for a
  completion marker that the previous init container's wrapper writes into a per-pod control
  volume (``/.dmsgw``) when its command exits 0. When an init container's command fails, its
  wrapper writes ``init-failed`` there instead, and every set-up still waiting fails: the DMS
  then fails the deployment, as Kubernetes fails the pod, rather than leaving it provisioning.
* **Command.** ``command`` is the entrypoint and ``args`` the cmd, with ``$(VAR)`` expanded
  from the container's environment as the kubelet does (:mod:`.env`); a container with a
  ``command`` runs under a shell wrapper that reports its runs (:mod:`.wrapper`).
* **Environment** (:mod:`.env`): literal values, and ``valueFrom`` resolved from what interLink
  sent and from the pod (:mod:`.values`).
* **Resources** (:mod:`.reservation`): cpu cores, RAM and disk bytes, and GPUs resolved to the
  exact vendor and model peers report (``options.gpu_models``, built by
  :func:`dmsgw.interlink.capacity.node_capacity.gpu_catalog`).
* **Volumes** (:mod:`.files`) are DMS ``local`` volumes with named sources: one per emptyDir
  for the whole pod, one per file volume and container, filled by the provision script.
* **Probes** run in the pod wrapper with the kubelet's semantics; an unwrapped container's
  liveness probe becomes the allocation's health check (:mod:`.probes`).
* **Placement** (:mod:`.pod_placement`): a pinned peer, excluded peers, the GPU type a selector
  requires.
* **interLink's networking annotations** (:mod:`.network`): the wstunnel client commands run
  in the wrapper of the container whose ports they expose, ``interlink.eu/pod-ip`` becomes
  ``POD_IP``, a plain pre-exec script runs before each command; the full-mesh script is
  refused.
* **Identity and policy** go into the metadata: :data:`METADATA_POD_UID` and its siblings,
  ``restartPolicy`` (which the PodActor applies), the termination grace period and active
  deadline.

The modules, foundation first: :mod:`.checks` (the error, fields the models do not type),
:mod:`.names` (what the ensemble is keyed by), :mod:`.inputs` (options, containers),
:mod:`.pod_placement`, :mod:`.reservation`, :mod:`.pod_context` (the pod indexed), :mod:`.values`,
:mod:`.env`, :mod:`.pod_network`, :mod:`.wrapper`, :mod:`.files`, :mod:`.probes` and
:mod:`.pod_ensemble` (:func:`pod_to_ensemble`).
"""

from .checks import PodTranslationError
from .inputs import TranslationOptions
from .names import (
    CONTROL_MOUNT,
    METADATA_ACTIVE_DEADLINE,
    METADATA_GENERATION,
    METADATA_GRACE_PERIOD,
    METADATA_POD_NAME,
    METADATA_POD_NAMESPACE,
    METADATA_POD_UID,
    METADATA_PROBES_PREFIX,
    METADATA_RESTART_POLICY,
    POD_NODE,
    allocation_key,
)
from .pod_ensemble import pod_to_ensemble
from .pod_placement import EXCLUDE_PEERS_ANNOTATION, GPU_TYPE_LABELS, PEER_ANNOTATION
from .wrapper import UNWRAPPED_ANNOTATION, is_wrapped

__all__ = [
    "CONTROL_MOUNT",
    "EXCLUDE_PEERS_ANNOTATION",
    "GPU_TYPE_LABELS",
    "METADATA_ACTIVE_DEADLINE",
    "METADATA_GENERATION",
    "METADATA_GRACE_PERIOD",
    "METADATA_POD_NAME",
    "METADATA_POD_NAMESPACE",
    "METADATA_POD_UID",
    "METADATA_PROBES_PREFIX",
    "METADATA_RESTART_POLICY",
    "PEER_ANNOTATION",
    "POD_NODE",
    "PodTranslationError",
    "TranslationOptions",
    "UNWRAPPED_ANNOTATION",
    "allocation_key",
    "is_wrapped",
    "pod_to_ensemble",
]
