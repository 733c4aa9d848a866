"""The pod and what interLink sent with it, checked as a whole and indexed for the translation
of each container: its ConfigMaps, Secrets and projected maps by name, its containers, its
volumes, its GPU type and every container's reservation."""

from __future__ import annotations

import dataclasses

from ..wire import k8s
from ..wire.bodies import RetrievedPodData
from .checks import POD_SPEC_IGNORED, PodTranslationError, check_extras, check_security_context
from .inputs import TranslationOptions, containers
from .pod_placement import gpu_type
from .reservation import empty_dir_disk, reservation

_FILE_VOLUMES = ("configMap", "secret", "projected", "downwardAPI")


@dataclasses.dataclass(frozen=True, slots=True)
class File:
    """A file of a volume, as the provision script writes it."""

    path: str
    data: bytes
    mode: int


class PodContext:
    """The pod and what was sent with it, indexed for the translation of each container."""

    def __init__(self, data: RetrievedPodData, options: TranslationOptions) -> None:
        self.pod = data.pod
        self.options = options
        self.uid = self.pod.metadata.uid
        self.config_maps: dict[str, k8s.ConfigMap] = {}
        self.secrets: dict[str, k8s.Secret] = {}
        self.projected: dict[str, k8s.ConfigMap] = {}
        for sent in data.containers:
            for cm in sent.config_maps:
                self.config_maps.setdefault(cm.metadata.name, cm)
            for secret in sent.secrets:
                self.secrets.setdefault(secret.metadata.name, secret)
            for pm in sent.projected_volume_maps:
                self.projected.setdefault(pm.metadata.name, pm)
        spec = self.pod.spec
        self.containers = containers(spec)
        self.by_name = {c.spec.name: c for c in self.containers}
        self.init_names = [c.name for c in spec.init_containers]
        self.volumes = index_volumes(spec, options)
        self.gpu_type = gpu_type(spec)
        disk = empty_dir_disk(self.containers, self.volumes)
        self.amounts = {
            c.spec.name: reservation(c, options, self.gpu_type, disk.get(c.spec.name, 0))
            for c in self.containers
        }
        # The files of each file volume, resolved by its first mount and shared by the others.
        self.volume_files: dict[str, tuple[File, ...]] = {}


def check_pod(pod: k8s.Pod) -> None:
    """What the whole pod must be before its containers are looked at."""
    if not pod.metadata.uid:
        raise PodTranslationError("metadata.uid", "required: the pod's volumes are named by it")
    spec = pod.spec
    if not spec.containers:
        raise PodTranslationError("spec.containers", "a pod needs at least one container")
    check_extras(spec, "spec", POD_SPEC_IGNORED)
    check_security_context(spec, "spec")
    if spec.image_pull_secrets:
        raise PodTranslationError(
            "spec.imagePullSecrets", "not supported: registry credentials cannot reach the DMS"
        )
    seen: dict[str, str] = {}
    for c in containers(spec):
        first = seen.setdefault(c.spec.name, c.path)
        if first != c.path:
            raise PodTranslationError(f"{c.path}.name", f"{c.spec.name!r} is also {first}")


def index_volumes(
    spec: k8s.PodSpec, options: TranslationOptions
) -> dict[str, tuple[int, k8s.Volume]]:
    """The pod's volumes by name, with their index in ``spec.volumes``; a kind the DMS cannot
    give is refused here, before any container mounts it."""
    volumes: dict[str, tuple[int, k8s.Volume]] = {}
    for i, volume in enumerate(spec.volumes):
        path = f"spec.volumes[{i}]"
        if volume.name in volumes:
            raise PodTranslationError(f"{path}.name", f"{volume.name!r} is declared twice")
        kind = volume.source_kind
        if kind not in ("emptyDir", *_FILE_VOLUMES):
            raise PodTranslationError(f"{path} ({kind})", "volume kind not supported")
        medium = volume.empty_dir.medium if volume.empty_dir else ""
        if medium == "Memory" and not options.memory_emptydir_on_disk:
            raise PodTranslationError(
                f"{path}.emptyDir.medium", "Memory (tmpfs) is not supported by DMS volumes"
            )
        if medium not in ("", "Memory"):
            raise PodTranslationError(f"{path}.emptyDir.medium", f"{medium!r} is not supported")
        volumes[volume.name] = (i, volume)
    return volumes
