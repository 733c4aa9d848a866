"""The shell wrapper that runs a container's command and reports its runs.

A container with a ``command`` runs ``/bin/sh -c <wrapper> dmsgw-pod <command> <args>``: the
wrapper reports the command's start and exit status on stderr
(:mod:`dmsgw.interlink.translate.run_markers`: the DMS reports neither), starts the command, runs
the ``postStart`` hook beside it (killing it if the hook fails), runs ``preStop`` when it is asked
to stop, forwards the signal, runs the container's probes with the kubelet's semantics
(:func:`probe_script`), writes an init container's completion marker and exits with the command's
status. The image needs ``/bin/sh`` then; a container named in the pod's
:data:`UNWRAPPED_ANNOTATION` runs its command as it is. A container without a ``command`` runs the
image's own entrypoint, which cannot be wrapped: its exit code stays unknown, and an init container
or one with lifecycle hooks is refused. The wrapper also runs the pod's pre-exec script and, in one
container, interLink's tunnel (:mod:`.pod_network`): a tunnel that ends stops the command as a
failed liveness probe does.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Sequence

from ..wire import k8s
from .checks import PodTranslationError, check_extras
from .inputs import Container
from .names import INIT_FAILED, TOOLS_PATH
from .pod_network import NO_NETWORK, PRE_EXEC_ANNOTATION, TUNNEL_ANNOTATION, PodNetwork
from .probes import ProbeRun
from .run_markers import EXIT_CODE_MARKER, PROBE_MARKER, STARTED_MARKER

UNWRAPPED_ANNOTATION = "dmsgw.io/unwrapped-containers"
"""Pod annotation: comma-separated names of containers to run without the gateway's shell
wrapper (for images without ``/bin/sh``); their exit codes are then unknown to the gateway."""

WRAPPER_NAME = "dmsgw-pod"
CONTAINER_PATH = 'PATH="$dmsgw_path"'
"""The prefix that gives a command of the container's (its command, hooks, exec probes) the
container's own ``PATH`` back inside the wrapper."""
DEFAULT_GRACE_S = 30
"""The pod's ``terminationGracePeriodSeconds`` when it has none, as the API server defaults it."""


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
    return f"{CONTAINER_PATH} {shlex.join(handler.exec.command)}"


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


def wrapper_script(
    c: Container,
    hooks: Hooks,
    marker: str,
    probes: Sequence[ProbeRun] = (),
    grace_s: int = DEFAULT_GRACE_S,
    network: PodNetwork = NO_NETWORK,
) -> str:
    """The shell that runs the container's command (``"$@"``) in the background so that it can
    run the ``postStart`` hook beside it, run ``preStop`` and forward the signal when it is
    asked to stop (and KILL the command ``grace_s`` after), run the ``probes`` (a failed
    liveness or startup probe stops the command as the kubelet would, within ``grace_s``),
    and, for an init container, write the completion ``marker`` when the command exits 0. It
    reports the command's start and exit status on stderr (the DMS reports neither) and exits
    with the command's status. Before the command it runs the pod's ``network.pre_exec``
    script and, in the tunnel's container, the tunnel (:func:`tunnel_script`)."""
    tunnel = network.tunnel_container == c.spec.name
    lines = [
        f"# dmsgw: runs container {c.spec.name!r}, reporting its start and exit on stderr",
        "pid= dmsgw_asked= dmsgw_stopped=",
        f'dmsgw_path="${{PATH-{TOOLS_PATH}}}"',
        f"PATH={TOOLS_PATH}",
        # Asked to stop: as the kubelet, KILL the command once the grace period has passed
        # (counted from now, preStop included), run preStop, then TERM it; once only, and
        # only once the command runs (a signal that comes before is carried out then).
        "dmsgw_stop() {",
        '  dmsgw_asked=1; [ -n "$pid" ] && [ -z "$dmsgw_stopped" ] || return 0; dmsgw_stopped=1',
        f'  (sleep {grace_s}; kill -KILL "$pid") >/dev/null 2>&1 &',
        *([f"  {hooks.pre_stop} || :"] if hooks.pre_stop else []),
        '  kill -TERM "$pid" 2>/dev/null',
        "}",
        "trap dmsgw_stop TERM INT",
        f"echo {shlex.quote(STARTED_MARKER)}",  # on stdout too: where each run's output starts
        f"echo {shlex.quote(STARTED_MARKER)} >&2",
        *([pre_exec_script(network.pre_exec)] if network.pre_exec else []),
        *([tunnel_script(network.tunnel)] if tunnel else []),
        f'{CONTAINER_PATH} "$@" &',
        "pid=$!",
        '[ -z "$dmsgw_asked" ] || dmsgw_stop',
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
    if probes:
        lines.append(probe_script(probes, hooks, grace_s))
    lines += [
        "while :; do",
        # 2>/dev/null: dash's wait reports a command killed by a signal ("Terminated") on
        # stderr, which is the container's log.
        '  wait "$pid" 2>/dev/null',
        "  code=$?",
        '  kill -0 "$pid" 2>/dev/null || break',
        "done",
    ]
    if probes:  # and wait until the probes' files are removed: the container ends with it
        lines += [
            'kill -TERM "$dmsgw_prober" 2>/dev/null',
            'while kill -0 "$dmsgw_prober" 2>/dev/null; do wait "$dmsgw_prober" 2>/dev/null; done',
        ]
    if tunnel:  # the command has ended: the tunnel goes with it (its end is no failure now)
        lines.append('kill -TERM "$dmsgw_tunnel" 2>/dev/null')
    if marker:
        failed = f"printf '%s\\n' {shlex.quote(c.spec.name)} > {shlex.quote(INIT_FAILED)}"
        done = f"rm -f {shlex.quote(INIT_FAILED)}; : > {shlex.quote(marker)}"
        # A success clears an earlier failure: the DMS retries provisioning in the same volume.
        lines.append(f'if [ "$code" -eq 0 ]; then {done}; else {failed}; fi')
    lines += [f'echo "{EXIT_CODE_MARKER}$code" >&2', 'exit "$code"']
    return "\n".join(lines) + "\n"


# --- the pod's network ----------------------------------------------------------------------


def pre_exec_script(script: str) -> str:
    """The wrapper's part that runs the pod's pre-exec ``script`` in the wrapper's own shell,
    as interLink's plugins run it in the job's, so that what it exports reaches the command;
    with the container's ``PATH``, which it may change. A failure is told on stderr and the
    command runs all the same, as after a plugin's pre-exec."""
    failed = f"dmsgw: the pre-exec script ({PRE_EXEC_ANNOTATION}) failed with status"
    return "\n".join(
        [
            'PATH="$dmsgw_path"',
            f'eval {shlex.quote(script)} || echo "{failed} $?" >&2',
            'dmsgw_path="$PATH"',
            f"PATH={TOOLS_PATH}",
        ]
    )


_TUNNEL_TAIL = """
dmsgw_rc=$?
[ -z "$!" ] || { wait "$!"; exit; }
exit "$dmsgw_rc"
"""
"""What follows the tunnel's commands in their shell: it lives as long as the last command they
started in the background (interLink's default line ends with ``&``), else ends with them."""


def tunnel_script(commands: str) -> str:
    """The wrapper's part that starts the pod's tunnel ``commands`` in the background, before
    the command: run by a shell of their own (the annotation stays one quoted word) with the
    container's ``PATH``, in a directory of their own (the default line downloads the client
    into the current one), removed when the tunnel ends. A tunnel that ends while the
    command runs is a failure: it is told on stderr, reported as the ``tunnel`` probe going
    down, and the wrapper is asked to stop (``TERM``, as the DMS asks it), so that the pod's
    ``restartPolicy`` restarts the container, tunnel included."""
    why = f"{TUNNEL_ANNOTATION} ended with status $_rc; its output is in the container's log"
    return "\n".join(
        [
            "dmsgw_tunnel_run() {",
            "  _c= _d=",
            '  trap \'kill -TERM "$_c" 2>/dev/null; rm -rf "$_d"; exit 0\' TERM',
            '  _d=$(mktemp -d 2>/dev/null) && cd "$_d"',
            f'  PATH="$dmsgw_path" /bin/sh -c {shlex.quote(commands + _TUNNEL_TAIL)} '
            "dmsgw-tunnel </dev/null &",
            "  _c=$!",
            '  wait "$_c"',
            "  _rc=$?",
            '  [ -z "$_d" ] || rm -rf "$_d"',
            '  echo "dmsgw: the tunnel ended with status $_rc; stopping the container" >&2',
            f'  echo "{PROBE_MARKER}tunnel:failing:{why}" >&2',
            f'  echo "{PROBE_MARKER}tunnel:down" >&2',
            "  kill -TERM $$",
            "}",
            "dmsgw_tunnel_run &",
            "dmsgw_tunnel=$!",
        ]
    )


# --- probes ----------------------------------------------------------------------------------

_HTTP_TOOLS = ("wget", "curl", "python3")
_TCP_TOOLS = ("nc", "bash", "python3")

_PROBE_FUNCTIONS = r"""
dmsgw_now() { date +%s 2>/dev/null || echo 0; }
# The image's programs (an exec probe's, the HTTP and TCP clients) are found through the
# container's PATH; the wrapper's own tools through its fixed one.
dmsgw_exec() { PATH="$dmsgw_path" "$@"; }
dmsgw_t0=$(dmsgw_now)
dmsgw_first() {  # the first of the commands that the image has
  for _t in "$@"; do
    PATH="$dmsgw_path" command -v "$_t" >/dev/null 2>&1 && { echo "$_t"; return 0; }
  done
  return 1
}
dmsgw_within() {  # seconds, output file, command...: its status (124: it timed out)
  _t=$1 _out=$2; shift 2
  "$@" >"$_out" 2>&1 </dev/null &
  _c=$!
  ( sleep "$_t"; kill -KILL "$_c" 2>/dev/null ) >/dev/null 2>&1 &
  _w=$!
  wait "$_c" 2>/dev/null
  _rc=$?
  kill -0 "$_w" 2>/dev/null || return 124
  kill "$_w" 2>/dev/null
  wait "$_w" 2>/dev/null
  return "$_rc"
}
dmsgw_http() {  # url, seconds: 0 when it answers 200-399
  case $dmsgw_http_tool in
  wget) PATH="$dmsgw_path" wget -S -T "$2" --no-check-certificate -O /dev/null "$1" ;;
  curl) _s=$(PATH="$dmsgw_path" curl -sS -k -m "$2" -o /dev/null -w '%{http_code}' "$1") || return 1
    [ "$_s" -ge 200 ] && [ "$_s" -lt 400 ] && return 0
    echo "status $_s"; return 1 ;;
  python3) PATH="$dmsgw_path" python3 -c '
import ssl, sys, urllib.error, urllib.request
try:
    code = urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]),
                                  context=ssl._create_unverified_context()).status
except urllib.error.HTTPError as exc:
    code = exc.code
except Exception as exc:
    sys.exit(str(exc))
sys.exit(0 if 200 <= code < 400 else f"status {code}")' "$1" "$2" ;;
  *) echo "the image has none of WGET_CURL_PYTHON3, which an httpGet probe needs"; return 127 ;;
  esac
}
dmsgw_tcp() {  # host, port, seconds: 0 when a connection opens
  case $dmsgw_tcp_tool in
  nc) PATH="$dmsgw_path" nc -z -w "$3" "$1" "$2" ;;
  bash) PATH="$dmsgw_path" bash -c 'exec 3<>"/dev/tcp/$1/$2"' dmsgw-tcp "$1" "$2" ;;
  python3) PATH="$dmsgw_path" python3 -c '
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    sys.exit(str(exc))' "$1" "$2" "$3" ;;
  *) echo "the image has none of NC_BASH_PYTHON3, which a tcpSocket probe needs"; return 127 ;;
  esac
}
dmsgw_read() {  # output file: read, so removed (never /dev/null, the fallback)
  [ "$1" = /dev/null ] || rm -f "$1"
}
dmsgw_reason() {  # output file, status: the output's last line, else the status
  _r=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 | tr -d '\r' | cut -c 1-200)
  echo "${_r:-exit status $2}"
}
dmsgw_kill() {  # as the kubelet kills a container that failed its probe
  PRE_STOP
  kill -TERM "$pid" 2>/dev/null
  _left=GRACE
  while [ "$_left" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do sleep 1; _left=$((_left - 1)); done
  kill -KILL "$pid" 2>/dev/null
}
dmsgw_probe() {  # kind, delay, period, timeout, successes, failures, label, check...
  _kind=$1 _delay=$2 _period=$3 _timeout=$4 _succ=$5 _fail=$6 _label=$7; shift 7
  # Each check's output: a file of the prober's own directory, removed once read.
  _out=/dev/null
  [ -z "$dmsgw_probe_dir" ] || _out="$dmsgw_probe_dir/$_kind"
  _wait=$((dmsgw_t0 + _delay - $(dmsgw_now)))
  [ "$_wait" -le 0 ] || sleep "$_wait"
  _ok=0 _bad=0 _state= _last=
  while kill -0 "$pid" 2>/dev/null; do
    if dmsgw_within "$_timeout" "$_out" "$@"; then
      dmsgw_read "$_out"
      _ok=$((_ok + 1)) _bad=0 _last=
      if [ "$_state" != ok ] && [ "$_ok" -ge "$_succ" ]; then
        _state=ok
        echo "PROBE_MARKER$_kind:ok" >&2
        [ "$_kind" != startup ] || return 0
      fi
    else
      _rc=$?
      _ok=0 _bad=$((_bad + 1))
      _why="timed out after $_timeout s"
      [ "$_rc" -eq 124 ] || _why=$(dmsgw_reason "$_out" "$_rc")
      dmsgw_read "$_out"
      if [ "$_why" != "$_last" ]; then
        _last=$_why
        echo "PROBE_MARKER$_kind:failing:$_label: $_why" >&2
      fi
      if [ "$_state" != down ] && [ "$_bad" -ge "$_fail" ]; then
        _state=down
        echo "PROBE_MARKER$_kind:down" >&2
        [ "$_kind" = readiness ] || { dmsgw_kill; return 1; }
      fi
    fi
    sleep "$_period"
  done
  return 1
}
""".strip()


def _probe_call(run: ProbeRun) -> tuple[str, str]:
    """The wrapper's call of ``dmsgw_probe`` for ``run``, and the check of a missing tool
    that tells the container's log at once (``""``: an exec probe needs none)."""
    timings = (
        run.kind,
        str(run.initial_delay_s),
        str(run.period_s),
        str(run.timeout_s),
        str(run.success_threshold),
        str(run.failure_threshold),
    )
    tools: tuple[str, ...] = ()
    var = ""
    if run.handler == "exec":
        label, check = f"exec {shlex.join(run.target)}", ["dmsgw_exec", *run.target]
    elif run.handler == "httpGet":
        (url,) = run.target
        label, check = f"HTTP GET {url}", ["dmsgw_http", url, str(run.timeout_s)]
        tools, var = _HTTP_TOOLS, "dmsgw_http_tool"
    else:
        host, port = run.target
        label, check = f"TCP {host}:{port}", ["dmsgw_tcp", host, port, str(run.timeout_s)]
        tools, var = _TCP_TOOLS, "dmsgw_tcp_tool"
    call = shlex.join([*timings, label, *check])
    missing = ""
    if tools:
        why = (
            f"dmsgw: the {run.kind} probe ({run.handler}) cannot run: the image has none of "
            f"{', '.join(tools)}"
        )
        missing = f'[ -n "${var}" ] || echo {shlex.quote(why)} >&2'
    return f"dmsgw_probe {call}", missing


def probe_script(probes: Sequence[ProbeRun], hooks: Hooks, grace_s: int) -> str:
    """The wrapper's part that runs ``probes`` beside the command (``$pid``), in the
    background ``$dmsgw_prober``: the startup probe first, then liveness and readiness
    (nothing is probed before the startup probe succeeds; a startup probe that fails stops
    the rest), each every ``periodSeconds`` after its ``initialDelaySeconds`` (counted from
    the container's start), within its ``timeoutSeconds``; ``successThreshold`` successes in
    a row make a probe succeed, ``failureThreshold`` failures fail it. A failed liveness or
    startup probe runs ``preStop``, then TERMs the command and KILLs it after ``grace_s``:
    the DMS's failure recovery (the pod's ``restartPolicy``) decides what comes next. Each
    outcome is reported on stderr (:data:`~dmsgw.interlink.translate.run_markers.PROBE_MARKER`).
    A check's output goes to a file in a temporary directory of the prober's, removed once
    read; the directory goes when the probes end or are stopped, and the wrapper waits for
    that before it exits: nothing is left behind in ``$TMPDIR`` for the sandbox to collect."""
    functions = _filled(
        _PROBE_FUNCTIONS,
        {
            "PROBE_MARKER": PROBE_MARKER,
            "WGET_CURL_PYTHON3": ", ".join(_HTTP_TOOLS),
            "NC_BASH_PYTHON3": ", ".join(_TCP_TOOLS),
            "PRE_STOP": f"{hooks.pre_stop} || :" if hooks.pre_stop else ":",
            "GRACE": str(grace_s),
        },
    )
    handlers = {run.handler for run in probes}
    lines = [functions]
    if "httpGet" in handlers:
        lines.append(f"dmsgw_http_tool=$(dmsgw_first {' '.join(_HTTP_TOOLS)})")
    if "tcpSocket" in handlers:
        lines.append(f"dmsgw_tcp_tool=$(dmsgw_first {' '.join(_TCP_TOOLS)})")
    calls = [_probe_call(run) for run in probes]
    lines += [missing for _, missing in calls if missing]
    first = [call for run, (call, _) in zip(probes, calls, strict=True) if run.kind == "startup"]
    rest = [call for run, (call, _) in zip(probes, calls, strict=True) if run.kind != "startup"]
    body = [
        "  trap dmsgw_probes_end TERM",
        "  dmsgw_kids=",
        # The checks' output files, in a directory of this container run's own ($$ is not
        # unique where pods share /tmp but not their PID namespace), removed when it ends.
        '  dmsgw_probe_dir=$(mktemp -d "${TMPDIR:-/tmp}/dmsgw-probes.XXXXXX" 2>/dev/null) ||'
        " dmsgw_probe_dir=",
    ]
    if first:
        body += [
            f"  {first[0]} &",
            "  dmsgw_kids=$!",
            '  wait "$dmsgw_kids" 2>/dev/null || dmsgw_probes_end',
        ]
    body += [f'  {call} &\n  dmsgw_kids="$dmsgw_kids $!"' for call in rest]
    body += ["  wait 2>/dev/null", "  dmsgw_probes_end"]
    lines += ["dmsgw_probes() {", *body, "}", *_PROBES_END, "dmsgw_probes &", "dmsgw_prober=$!"]
    return "\n".join(lines)


_PROBES_END = [
    "dmsgw_probes_end() {  # the probes stopped, their directory removed (TERM, or all ended)",
    "  kill $dmsgw_kids 2>/dev/null",
    '  [ -z "$dmsgw_probe_dir" ] || rm -rf "$dmsgw_probe_dir"',
    "  exit 0",
    "}",
]


def _filled(template: str, values: dict[str, str]) -> str:
    """``template`` with each of the ``values``' names replaced, in one pass: what is put in
    (a ``preStop`` command) is never read again for a name (``echo GRACEFUL`` stays as it
    is)."""
    names = re.compile("|".join(re.escape(name) for name in values))
    return names.sub(lambda found: values[found[0]], template)
