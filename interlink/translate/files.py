"""A container's volumes: emptyDirs shared by the pod, and the files of ConfigMap, Secret,
projected and downwardAPI volumes written by the container's provision script.

Volumes are DMS ``local`` volumes with a *named* source that the executor creates on the host
on first use and shares between the allocations of the node that name it: an emptyDir is one
such volume for the whole pod; a file volume is one per container, filled by the container's
provision script (files, sub-directories and modes), and mounted read-only. The names are
``dmsgw.<pod uid>.empty.<volume>``, ``dmsgw.<pod uid>.files.<container>.<volume>`` and
``dmsgw.<pod uid>.ctl.<generation>``. The provision script also waits for the init container
before its own to complete.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from ...behaviors.ensemble import VolumeConfig
from ..wire import k8s
from .checks import MOUNT_IGNORED, PodTranslationError, check_extras
from .inputs import Container
from .names import CONTROL_MOUNT, INIT_FAILED, TOOLS_PATH
from .pod_context import File, PodContext
from .values import config_map_data, field_value, resource_value, secret_data, utf8

_DEFAULT_FILE_MODE = 0o644
_PRINTF_CHUNK = 1024


# --- the files of file volumes ---------------------------------------------------------------


def _file_path(value: str, path: str) -> str:
    """A relative file path inside a volume, as the API server allows it."""
    parts = PurePosixPath(value).parts
    if not value or value.startswith("/") or ".." in parts or "\x00" in value:
        raise PodTranslationError(path, f"{value!r} must be a relative path without '..'")
    return str(PurePosixPath(*parts))


def _mode(value: int | None, default: int | None) -> int:
    if value is not None:
        return value
    return default if default is not None else _DEFAULT_FILE_MODE


def _keyed_files(
    data: Mapping[str, bytes] | None,
    items: Sequence[k8s.KeyToPath],
    optional: bool,
    mode: int,
    path: str,
    what: str,
) -> list[File]:
    """The files of a ConfigMap or Secret source: its ``items``, or every key."""
    if data is None:
        if optional:
            return []
        raise PodTranslationError(path, f"{what} was not sent by interLink")
    if not items:
        return [File(_file_path(key, path), data[key], mode) for key in sorted(data)]
    files = []
    for i, item in enumerate(items):
        if item.key not in data:
            if optional:
                continue
            raise PodTranslationError(f"{path}.items[{i}]", f"{what} has no key {item.key!r}")
        files.append(
            File(
                _file_path(item.path, f"{path}.items[{i}].path"),
                data[item.key],
                _mode(item.mode, mode),
            )
        )
    return files


def _downward_files(
    ctx: PodContext,
    items: Sequence[k8s.DownwardAPIVolumeFile],
    mode: int,
    path: str,
    sent: Mapping[str, bytes],
) -> list[File]:
    files = []
    for i, item in enumerate(items):
        item_path = f"{path}.items[{i}]"
        name = _file_path(item.path, f"{item_path}.path")
        if name in sent:
            data = sent[name]
        elif item.field_ref is not None:
            field = field_value(ctx, item.field_ref, f"{item_path}.fieldRef", whole_maps=True)
            data = utf8(field)
        elif item.resource_field_ref is not None:
            ref = item.resource_field_ref
            if not ref.container_name:
                raise PodTranslationError(f"{item_path}.resourceFieldRef.containerName", "required")
            data = utf8(resource_value(ctx, ref, f"{item_path}.resourceFieldRef", ""))
        else:
            raise PodTranslationError(item_path, "needs a fieldRef or a resourceFieldRef")
        files.append(File(name, data, _mode(item.mode, mode)))
    return files


def _projected_files(
    ctx: PodContext, path: str, volume: k8s.Volume, sent: Mapping[str, bytes]
) -> list[File]:
    """A projected volume: each source resolved from what interLink sent, the downward API
    and service-account tokens from the volume's projected map first (tokens only exist
    there); files of the map that no source produced are added as interLink resolved them."""
    assert volume.projected is not None
    mode = _mode(volume.projected.default_mode, None)
    files: list[File] = []
    for i, source in enumerate(volume.projected.sources):
        spath = f"{path}.projected.sources[{i}]"
        check_extras(source, spath)
        if source.config_map is not None:
            ref = source.config_map
            data = _with_sent(config_map_data(ctx.config_maps.get(ref.name)), ref.items, sent)
            files += _keyed_files(
                data,
                ref.items,
                bool(ref.optional),
                mode,
                f"{spath}.configMap",
                f"ConfigMap {ref.name!r}",
            )
        elif source.secret is not None:
            sref = source.secret
            secret = ctx.secrets.get(sref.name)
            data = _with_sent(secret_data(secret) if secret else None, sref.items, sent)
            files += _keyed_files(
                data,
                sref.items,
                bool(sref.optional),
                mode,
                f"{spath}.secret",
                f"Secret {sref.name!r}",
            )
        elif source.downward_api is not None:
            files += _downward_files(
                ctx, source.downward_api.items, mode, f"{spath}.downwardAPI", sent
            )
        elif source.service_account_token is not None:
            token = _file_path(
                source.service_account_token.path, f"{spath}.serviceAccountToken.path"
            )
            if token not in sent:
                raise PodTranslationError(
                    f"{spath}.serviceAccountToken", "interLink sent no token for this volume"
                )
            files.append(File(token, sent[token], mode))
        else:
            raise PodTranslationError(spath, "no source given")
    produced = {f.path for f in files}
    files += [File(name, sent[name], mode) for name in sorted(sent) if name not in produced]
    return files


def _with_sent(
    data: dict[str, bytes] | None, items: Sequence[k8s.KeyToPath], sent: Mapping[str, bytes]
) -> dict[str, bytes] | None:
    """A projected ConfigMap/Secret source's data; when the object itself was not sent but
    interLink resolved the volume, the source's files are taken from the volume's map (with
    no ``items``, the map's remaining files are added by :func:`_projected_files`)."""
    if data is not None or not sent:
        return data
    return {item.key: sent[item.path] for item in items if item.path in sent}


_VOLUME_FIELDS = {
    "emptyDir": "empty_dir",
    "configMap": "config_map",
    "secret": "secret",
    "projected": "projected",
    "downwardAPI": "downward_api",
}


def _volume_files(ctx: PodContext, path: str, volume: k8s.Volume) -> tuple[File, ...]:
    check_extras(
        getattr(volume, _VOLUME_FIELDS[volume.source_kind]), f"{path}.{volume.source_kind}"
    )
    sent_map = ctx.projected.get(volume.name)
    sent = config_map_data(sent_map) or {}
    files: list[File]
    if volume.config_map is not None:
        ref = volume.config_map
        files = _keyed_files(
            config_map_data(ctx.config_maps.get(ref.name)),
            ref.items,
            bool(ref.optional),
            _mode(ref.default_mode, None),
            f"{path}.configMap",
            f"ConfigMap {ref.name!r}",
        )
    elif volume.secret is not None:
        sref = volume.secret
        secret = ctx.secrets.get(sref.secret_name)
        files = _keyed_files(
            secret_data(secret) if secret else None,
            sref.items,
            bool(sref.optional),
            _mode(sref.default_mode, None),
            f"{path}.secret",
            f"Secret {sref.secret_name!r}",
        )
    elif volume.downward_api is not None:
        files = _downward_files(
            ctx,
            volume.downward_api.items,
            _mode(volume.downward_api.default_mode, None),
            f"{path}.downwardAPI",
            sent,
        )
    else:
        files = _projected_files(ctx, path, volume, sent)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            raise PodTranslationError(path, f"two files at the same path {f.path!r}")
        seen.add(f.path)
    return tuple(files)


def _files_of(ctx: PodContext, name: str) -> tuple[File, ...]:
    """The files of file volume ``name`` (resolved once, shared by its mounts)."""
    if name not in ctx.volume_files:
        index, volume = ctx.volumes[name]
        ctx.volume_files[name] = _volume_files(ctx, f"spec.volumes[{index}]", volume)
    return ctx.volume_files[name]


# --- the provision script --------------------------------------------------------------------


def _printf_format(data: bytes) -> str:
    """``data`` as a single-quoted ``printf`` format that writes exactly these bytes: printable
    ASCII as itself, ``%`` and ``\\`` escaped, everything else (quotes, newlines, binary, a
    leading ``-``) as a three-digit octal escape, which every POSIX ``printf`` understands."""
    out = []
    for n, byte in enumerate(data):
        if n == 0 and byte == 0x2D:  # a leading "-" would read as an option
            out.append("\\055")
        elif byte == 0x25:
            out.append("%%")
        elif byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte < 0x7F and byte != 0x27:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return "'" + "".join(out) + "'"


class ProvisionScript:
    """A container's provision script: it writes the files of its file volumes and waits for
    the init container before it to complete. Runs before the container's command."""

    def __init__(self, container: str, pod: k8s.Pod) -> None:
        meta = pod.metadata
        where = f"{meta.namespace}/{meta.name}"  # quoted below: a name must not end the comment
        self.lines = [
            f"# dmsgw: set-up of container {container!r} of pod {where!r}",
            "set -e",
            "umask 022",
            f"PATH={TOOLS_PATH}",  # the gateway's tools, not what the container's PATH names
        ]
        self.empty = True

    def write_files(self, mount: str, files: Sequence[File]) -> None:
        directories = sorted({str(PurePosixPath(mount, f.path).parent) for f in files} | {mount})
        self.lines += [f"mkdir -p {shlex.quote(d)}" for d in directories]
        for f in files:
            target = shlex.quote(str(PurePosixPath(mount, f.path)))
            chunks = [f.data[i : i + _PRINTF_CHUNK] for i in range(0, len(f.data), _PRINTF_CHUNK)]
            for n, chunk in enumerate(chunks or [b""]):
                self.lines.append(
                    f"printf {_printf_format(chunk)} {'>' if n == 0 else '>>'} {target}"
                )
            self.lines.append(f"chmod {f.mode:o} {target}")
        self.empty = False

    def wait_for(self, marker: str, container: str) -> None:
        """Until ``container`` has completed; an init container that failed (this one or an
        earlier one) fails this set-up, so that the deployment fails instead of waiting."""
        failed = shlex.quote(INIT_FAILED)
        self.lines += [
            f"# wait for init container {container!r} to complete",
            f"while [ ! -e {shlex.quote(marker)} ]; do",
            f"  if [ -e {failed} ]; then",
            f'    echo "dmsgw: init container $(cat {failed}) failed" >&2',
            "    exit 1",
            "  fi",
            "  sleep 1",
            "done",
        ]
        self.empty = False

    def render(self) -> bytes:
        return utf8("\n".join(self.lines) + "\n")


# --- mounts ----------------------------------------------------------------------------------


def _overlaps(a: str, b: str) -> bool:
    """Whether one of two absolute paths is the other or inside it."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def volume_configs(
    ctx: PodContext, c: Container, script: ProvisionScript
) -> tuple[VolumeConfig, ...]:
    """The container's mounts as DMS volumes (files written by ``script``)."""
    configs: list[VolumeConfig] = []
    destinations: dict[str, str] = {}
    if ctx.init_names:
        configs.append(
            VolumeConfig(
                type="local",
                name="dmsgw-control",
                src=f"dmsgw.{ctx.uid}.ctl.{ctx.options.generation}",
                mount_destination=CONTROL_MOUNT,
            )
        )
    for j, mount in enumerate(c.spec.volume_mounts):
        path = f"{c.path}.volumeMounts[{j}]"
        check_extras(mount, path, MOUNT_IGNORED)
        if mount.sub_path:
            raise PodTranslationError(f"{path}.subPath", "not supported: mount the whole volume")
        entry = ctx.volumes.get(mount.name)
        if entry is None:
            raise PodTranslationError(f"{path}.name", f"no volume {mount.name!r} in spec.volumes")
        target = str(PurePosixPath(mount.mount_path))
        if not mount.mount_path.startswith("/") or ".." in PurePosixPath(target).parts:
            raise PodTranslationError(f"{path}.mountPath", "must be an absolute path without '..'")
        if target in destinations:
            raise PodTranslationError(
                f"{path}.mountPath", f"{target!r} is also {destinations[target]}"
            )
        if ctx.init_names and _overlaps(target, CONTROL_MOUNT):
            raise PodTranslationError(
                f"{path}.mountPath",
                f"{target!r} overlaps the pod's control volume at {CONTROL_MOUNT}",
            )
        destinations[target] = f"volumeMounts[{j}]"
        volume = entry[1]
        if volume.source_kind == "emptyDir":
            configs.append(
                VolumeConfig(
                    type="local",
                    name=volume.name,
                    src=f"dmsgw.{ctx.uid}.empty.{volume.name}",
                    mount_destination=target,
                    read_only=mount.read_only,
                )
            )
            continue
        script.write_files(target, _files_of(ctx, volume.name))
        configs.append(
            VolumeConfig(
                type="local",
                name=volume.name,
                src=f"dmsgw.{ctx.uid}.files.{c.spec.name}.{volume.name}",
                mount_destination=target,
                read_only=True,
            )
        )
    return tuple(configs)
