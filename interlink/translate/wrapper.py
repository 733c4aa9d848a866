"""The shell wrapper that runs a container's command and reports its runs.

A container with a ``command`` runs ``/bin/sh -c <wrapper> dmsgw-pod <command> <args>``: the
wrapper reports the command's start and exit status on stderr (:mod:`dmsgw.interlink.run_markers`:
the DMS reports neither), starts the command, runs the ``postStart`` hook beside it (killing it
if the hook fails), runs ``preStop`` when it is asked to stop, forwards the signal, writes an
init container's completion marker and exits with the command's status. The image needs
``/bin/sh`` then; a container named in the pod's :data:`UNWRAPPED_ANNOTATION` runs its command
as it is. A container without a ``command`` runs the image's own entrypoint, which cannot be
wrapped: its exit code stays unknown, and an init container or one with lifecycle hooks is
refused.
"""

from __future__ import annotations

import dataclasses
import json
import shlex

from .. import k8s
from ..run_markers import EXIT_CODE_MARKER, STARTED_MARKER
from .checks import PodTranslationError, check_extras
from .inputs import Container
from .names import INIT_FAILED

UNWRAPPED_ANNOTATION = "dmsgw.io/unwrapped-containers"
"""Pod annotation: comma-separated names of containers to run without the gateway's shell
wrapper (for images without ``/bin/sh``); their exit codes are then unknown to the gateway."""

WRAPPER_NAME = "dmsgw-pod"


def is_wrapped(pod: k8s.Pod, container: k8s.Container) -> bool:
    """Whether the container runs under the wrapper that reports its runs on stderr: those
    with a ``command`` (the image's own entrypoint cannot be wrapped) that the pod does not
    name in :data:`UNWRAPPED_ANNOTATION`."""
    return bool(container.command) and container.name not in unwrapped(pod)


def unwrapped(pod: k8s.Pod) -> set[str]:
    listed = pod.metadata.annotations.get(UNWRAPPED_ANNOTATION, "")
    return {name.strip() for name in listed.split(",") if name.strip()}


def check_unwrapped(pod: k8s.Pod) -> None:
    """A name in :data:`UNWRAPPED_ANNOTATION` that is no container is a typo to point at."""
    names = {c.name for c in (*pod.spec.init_containers, *pod.spec.containers)}
    unknown = sorted(unwrapped(pod) - names)
    if unknown:
        raise PodTranslationError(
            f"metadata.annotations[{json.dumps(UNWRAPPED_ANNOTATION)}]",
            f"no container named {', '.join(map(repr, unknown))} in the pod",
        )


def _hook(handler: k8s.LifecycleHandler | None, path: str) -> str:
    """An ``exec`` hook as a shell command line (``""`` when there is none)."""
    if handler is None:
        return ""
    check_extras(handler, path)
    if handler.http_get is not None or handler.tcp_socket is not None:
        kind = "httpGet" if handler.http_get is not None else "tcpSocket"
        raise PodTranslationError(f"{path}.{kind}", "not supported: only exec hooks can be run")
    if handler.exec is None or not handler.exec.command:
        raise PodTranslationError(path, "an exec hook needs a command")
    return shlex.join(handler.exec.command)


@dataclasses.dataclass(frozen=True, slots=True)
class Hooks:
    post_start: str = ""
    pre_stop: str = ""


def lifecycle_hooks(c: Container) -> Hooks:
    lifecycle = c.spec.lifecycle
    if lifecycle is None:
        return Hooks()
    path = f"{c.path}.lifecycle"
    check_extras(lifecycle, path)
    return Hooks(
        post_start=_hook(lifecycle.post_start, f"{path}.postStart"),
        pre_stop=_hook(lifecycle.pre_stop, f"{path}.preStop"),
    )


def wrapper_script(c: Container, hooks: Hooks, marker: str) -> str:
    """The shell that runs the container's command (``"$@"``) in the background so that it can
    run the ``postStart`` hook beside it, run ``preStop`` and forward the signal when it is
    asked to stop, and, for an init container, write the completion ``marker`` when the
    command exits 0. It reports the command's start and exit status on stderr (the DMS reports
    neither) and exits with the command's status."""
    on_stop = f"{hooks.pre_stop} || :; " if hooks.pre_stop else ""
    on_stop += '[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null'
    lines = [
        f"# dmsgw: runs container {c.spec.name!r}, reporting its start and exit on stderr",
        "pid=",
        f"trap {shlex.quote(on_stop)} TERM INT",
        f"echo {shlex.quote(STARTED_MARKER)} >&2",
        '"$@" &',
        "pid=$!",
    ]
    if hooks.post_start:
        lines += [
            f"if ! {hooks.post_start}; then",
            "  echo 'dmsgw: the postStart hook failed; stopping the container' >&2",
            '  kill -TERM "$pid" 2>/dev/null',
            # A TERM that reaches the child before it has exec'd the command hits the trap it
            # inherited and is lost: ask again once the command runs.
            "  sleep 1",
            '  kill -TERM "$pid" 2>/dev/null',
            "fi",
        ]
    lines += [
        "while :; do",
        '  wait "$pid"',
        "  code=$?",
        '  kill -0 "$pid" 2>/dev/null || break',
        "done",
    ]
    if marker:
        failed = f"printf '%s\\n' {shlex.quote(c.spec.name)} > {shlex.quote(INIT_FAILED)}"
        done = f"rm -f {shlex.quote(INIT_FAILED)}; : > {shlex.quote(marker)}"
        # A success clears an earlier failure: the DMS retries provisioning in the same volume.
        lines.append(f'if [ "$code" -eq 0 ]; then {done}; else {failed}; fi')
    lines += [f'echo "{EXIT_CODE_MARKER}$code" >&2', 'exit "$code"']
    return "\n".join(lines) + "\n"
