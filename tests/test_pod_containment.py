"""Pods stay in their place: each attack a hostile pod author made on the embedded devnet,
written as that pod, and shown to fail.

* a pod's ``PATH`` (and ``LD_*``) reaching a step the devnet runs as root;
* a pod reaching the gateway's plugin API and operator port, a devnet node's API, or a host
  service listening on every address;
* a pod reading another pod's environment (``/proc/<pid>/environ``), files, Secrets and logs;
* a deleted pod's files left behind.

The pods are shell commands the devnet runs as host processes; what they found is read from
their own output (or exit code). Each attack also does something it must be able to do (read
its own environment, reach a public port's relay), so that a pod that could do nothing at all
does not pass for a contained one.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import os
import shutil
import socket
import stat
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from dmsgw.devnet.confinement import CLAIMS_DIR, IDENTITY_BASE, Identities, unprivileged
from dmsgw.devnet.devnet import Devnet
from dmsgw.devnet.executor import probe_isolation
from dmsgw.devnet.forwarding import _listening_socket
from dmsgw.devnet.netns import GATEWAY
from dmsgw.devnet.pytest_plugin import (
    EmbeddedDevnet,
    one_node_ensemble,
    shell_allocation,
    start_embedded,
)
from dmsgw.devnet.sandbox import Isolation
from dmsgw.devnet.userns import UserNamespaces
from dmsgw.devnet_files.devnet_record import process_start_time
from tests.support.devnet_gateways import (
    NAMESPACES_POSSIBLE,
    PYTHON,
    serving,
)
from tests.support.gateway_fakes import pod, uid, until_async
from tests.support.ordinary_user import ORDINARY, USERS, cases, played_elsewhere

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT, reason="a user per pod and root's set-up steps exist only on a root devnet"
)
PRIVILEGED = ("unshare", "mount", "setpriv", "nsenter", "env", "mkdir", "chmod", "true", "ip")
PRIVILEGED += ("bash",)
"""Every program the devnet's set-up runs, which a pod's ``PATH`` must never choose."""
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


ISOLATIONS = sorted({Isolation.REWRITE, asyncio.run(probe_isolation())})
"""Path rewriting always; mount namespaces too where this process can make them (root)."""


def _service(script: str, env: dict[str, str], **fields: Any) -> dict[str, Any]:
    allocation = shell_allocation("service", script, **fields)
    allocation["execution"]["params"]["environment"] = [f"{k}={v}" for k, v in env.items()]
    return allocation


def _healthy(h: EmbeddedDevnet, eid: str) -> bool:
    info = h.dms.deployment.status(eid).allocation_info or {}
    return any(i.health == "healthy" for i in info.values())


def _with_script(ensemble: dict[str, Any], name: str, text: str) -> dict[str, Any]:
    ensemble["v1"]["scripts"] = {name: base64.b64encode(text.encode()).decode()}
    return ensemble


# --- a pod's environment never reaches a privileged step --------------------------------------


@pytest.mark.parametrize(("user", "isolation"), cases(ISOLATIONS))
def test_a_pods_path_never_chooses_a_program_of_the_set_up(
    user: str, isolation: Isolation, host_dir: Path
) -> None:
    """The issue's critical attack: ``PATH`` put a pod's own ``unshare`` (and ``mount``,
    ``setpriv``, ``nsenter``…) before the system's, and root ran it when the allocation
    started, restarted, or was health-checked. Each fake here records who ran it; none may
    run at all, while the pod's own command is still found through its ``PATH``."""
    if played_elsewhere(user):
        return
    fakes = host_dir / "bin"
    fakes.mkdir(mode=0o755)
    proof = host_dir / "proof"
    for name in (*PRIVILEGED, "mine"):
        fake = fakes / name
        fake.write_text(f'#!/bin/sh\necho "{name} $(id -u)" >> {proof}\nexit 0\n')
        fake.chmod(0o755)
    env = {"PATH": f"{fakes}:{SYSTEM_PATH}"}
    check = {"type": "command", "exec": ["mine"], "interval": 10**8}
    volume = [{"type": "local", "src": "ro-data", "mount_destination": "/data", "read_only": True}]
    svc = _service(
        "echo up; exec sleep 60",
        env,
        provision=["setup"],
        healthcheck=check,
        volume=volume,
    )
    ensemble = _with_script(one_node_ensemble({"svc": svc}), "setup", "true\n")
    h = start_embedded(nodes=1, seed=f"path-{isolation}", isolation=isolation)
    try:
        eid = h.dms.deployment.new(ensemble).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        h.wait_for(lambda: h.stdout(eid, "n1.svc") == "up\n", what="the command")
        allocation = h.faults.allocation(eid, "svc")
        h.background.call(allocation.restart())  # the restart
        h.wait_for(lambda: h.stdout(eid, "n1.svc") == "up\nup\n", what="the restart")

        h.wait_for(lambda: _healthy(h, eid), what="the health check, found through the pod's PATH")
        ran = proof.read_text().splitlines()
        assert ran and {line.split()[0] for line in ran} == {"mine"}, ran
        assert "mine 0" not in ran  # and the pod's own check did not run as root either
    finally:
        h.close()


@pytest.mark.parametrize(("user", "isolation"), cases(ISOLATIONS))
def test_a_pods_loader_variables_never_reach_a_privileged_step(
    user: str, isolation: Isolation, host_dir: Path
) -> None:
    """``LD_PRELOAD`` and its family are read by the dynamic loader of every program the
    variables reach. With ``LD_DEBUG_OUTPUT`` the loader of each such program leaves a trace
    file owned by whoever ran it: only the pod's own user may leave one, and no trace may
    name a set-up program."""
    if played_elsewhere(user):
        return
    traces = host_dir / "trace"
    libc = next(Path("/").glob("usr/lib/*/libc.so.6"), None) or next(
        Path("/").glob("lib*/libc.so.6")
    )
    env = {
        "LD_PRELOAD": str(libc),
        "LD_DEBUG": "files",
        "LD_DEBUG_OUTPUT": str(traces),
        "LD_LIBRARY_PATH": str(host_dir),
        "IFS": "/",
        "BASH_ENV": str(host_dir / "bashrc"),
        "ENV": str(host_dir / "bashrc"),
    }
    (host_dir / "bashrc").write_text(f"id -u >> {host_dir / 'sourced'}\n")
    check = {"type": "command", "exec": ["true"], "interval": 10**8}
    svc = _service("echo up; exec sleep 60", env, provision=["setup"], healthcheck=check)
    ensemble = _with_script(one_node_ensemble({"svc": svc}), "setup", "true\n")
    h = start_embedded(nodes=1, seed=f"loader-{isolation}", isolation=isolation)
    try:
        eid = h.dms.deployment.new(ensemble).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        h.wait_for(lambda: h.stdout(eid, "n1.svc") == "up\n", what="the command")

        h.wait_for(lambda: _healthy(h, eid), what="the health check")
        run_as = h.faults.allocation(eid, "svc").plan.run_as  # type: ignore[union-attr]
        pod_uid = run_as.uid if run_as is not None else os.geteuid()
        written = sorted(host_dir.glob("trace.*"))
        assert written, "the pod's own programs were traced"
        owners = {p.stat().st_uid for p in written}
        assert owners == {pod_uid}, f"traces left by uids {owners}, the pod is {pod_uid}"
        named = {n for p in written for n in PRIVILEGED if f"/{n} " in p.read_text()}
        assert not named - {"env", "true"}, named
        if (host_dir / "sourced").exists():  # a shell of the pod's own read its start-up file
            assert "0" not in (host_dir / "sourced").read_text().split()
    finally:
        h.close()


# --- a pod reaches no API of the gateway or of the devnet ------------------------------------

REACH = """
import socket, sys
reached, allowed = [], False
own = socket.create_server(('127.0.0.1', 0))  # its own loopback is its own
sys.argv.append('127.0.0.1:%d:yes' % own.getsockname()[1])
for host, port, must in [tuple(t.split(':')) for t in sys.argv[1:]]:
    try:
        if host == 'unix':  # a socket file's path
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(port)
        else:
            socket.create_connection((host, int(port)), 3).close()
    except OSError:
        continue
    if must == 'yes':
        allowed = True
    else:
        reached.append(host + ':' + port)
print('reached', reached, 'allowed', allowed, flush=True)
sys.exit(4 if reached else 0 if allowed else 3)
"""


def _host_address() -> str | None:
    """An address of this host's that is not loopback (where a service on every address is
    reached from elsewhere), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: the route picks the address
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.mark.skipif(PYTHON is None, reason="the attacking pod runs /usr/bin/python3")
@pytest.mark.parametrize("user", USERS)
async def test_a_pod_reaches_no_api_of_the_gateway_or_the_devnet(user: str, tmp_path: Path) -> None:
    """The issue's second attack: a pod without ports shared the host's network and read
    every pod through the operator port, and deleted them through the plugin API. Now it
    tries the plugin API, the operator port, every devnet node's API and a host service
    bound to every address (at 127.0.0.1, at the hub's gateway address, at the host's own
    address), nor the plugin API's unix socket where the gateway makes it by default, in its
    user's home: it reaches none, and still reaches its own loopback — and, on a root devnet,
    the relays of public ports in the hub (an ordinary user's devnet has no hub: its pods
    have a network namespace holding their loopback alone)."""
    if played_elsewhere(user):
        return
    if user == "root" and not NAMESPACES_POSSIBLE:
        pytest.skip("network namespaces need ip (iproute2)")
    anywhere = socket.create_server(("0.0.0.0", 0))
    private = Path.home() / f".dmsgw-reach-{os.getpid()}"  # as ~/.interlink: 0700, socket 0600
    private.mkdir(mode=0o700)
    plugin_socket = socket.socket(socket.AF_UNIX)
    plugin_socket.bind(str(private / "plugin.sock"))
    plugin_socket.listen()
    async with serving(tmp_path, network_namespaces=True if user == "root" else None) as s:
        namespaces = s.devnet.networks.namespaces
        relay = socket.socket()
        if namespaces is not None:
            relay.close()
            relay = await namespaces.hub.socket(functools.partial(_listening_socket, GATEWAY, 0))
            relay.listen()
        try:
            every = anywhere.getsockname()[1]
            targets = [
                f"127.0.0.1:{s.plugin.port}:no",
                f"127.0.0.1:{s.operator.port}:no",
                f"unix:{private / 'plugin.sock'}:no",
                *(f"{url.split('//')[1]}:no" for url in s.devnet.urls),
                f"127.0.0.1:{every}:no",
                f"{GATEWAY}:{every}:no",
                *([f"{a}:{every}:no"] if (a := _host_address()) else []),
                *([f"{GATEWAY}:{relay.getsockname()[1]}:yes"] if namespaces else []),
            ]
            attacker = pod(uid(25), command=[PYTHON, "-c", REACH, *targets])
            await s.create(attacker)

            async def ended() -> bool:
                return "terminated" in await s.state(attacker)

            await until_async(ended, "the attacking pod ends")
            terminated = (await s.state(attacker))["terminated"]
            assert terminated["exitCode"] == 0, terminated
        finally:
            relay.close()
            anywhere.close()
            plugin_socket.close()
            shutil.rmtree(private)


# --- a pod reads nothing of another pod --------------------------------------------------------

SECRET = "the-victims-secret-7f3a"
MINE = "ATTACKERS_OWN_9C1D"
STEAL = r"""
echo "own: $(cat /proc/$$/environ | tr '\0' '\n' | grep -c MINE=)"
for e in /proc/[0-9]*/environ; do cat "$e" 2>/dev/null | tr '\0' '\n' | grep SECRET; done
top="${HOME%/allocations/*}"
grep -rhs SECRET "$top/allocations" "$top/volumes" 2>/dev/null
grep -rhs SECRET "$top/.." 2>/dev/null | head -n 5
grep -hs SECRET STATEFILE
echo done
exec sleep 60
"""


@pytest.mark.parametrize(("user", "isolation"), cases(ISOLATIONS))
def test_a_pod_reads_no_other_pods_env_files_secrets_or_logs(
    user: str, isolation: Isolation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's third attack: every pod ran as ``nobody``, so one read another's Secret
    from ``/proc/<pid>/environ``, from its volumes and key files in the devnet's work
    directory (found from its own ``$HOME``), and read its logs. The victim holds its secret
    in its environment, a Secret-like key file, a volume written by its provision script,
    and its stdout; the attacker, another pod on the same node, finds it nowhere — and it
    does find its own environment. On an ordinary user's devnet both pods run as that user:
    their PID and mount namespaces keep them apart. Nor does it read the gateway's state
    (which holds every pod's Secret data)."""
    if played_elsewhere(user):
        return
    victim = _service(
        f"echo {SECRET} > $HOME/note; echo {SECRET}; exec sleep 60",
        {"SECRET": SECRET},
        provision=["secret"],
        volume=[{"type": "local", "src": "victim-data", "mount_destination": "/secret"}],
        keys=[{"type": "ssh", "dest": "/keys/token", "file": SECRET}],
    )
    victim_ensemble = _with_script(
        one_node_ensemble({"victim": victim}), "secret", f"echo {SECRET} > /secret/value\n"
    )
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the gateway's state: pod Secrets
    state = tmp_path / "dmsgw" / "gateway.sqlite3"
    state.parent.mkdir(mode=0o700)
    state.write_text(SECRET)
    state.chmod(0o600)
    steal = STEAL.replace("SECRET", SECRET).replace("MINE", MINE)
    attacker = _service(steal.replace("STATEFILE", str(state)), {MINE: "1"})
    h = start_embedded(nodes=1, seed=f"steal-{isolation}", isolation=isolation)
    try:
        victim_id = h.dms.deployment.new(victim_ensemble).ensemble_id
        assert h.wait_status(victim_id, "Running", "Failed") == "Running"
        h.wait_for(lambda: SECRET in h.stdout(victim_id, "n1.victim"), what="the victim")
        eid = h.dms.deployment.new(one_node_ensemble({"attacker": attacker})).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        out = h.wait_for(
            lambda: (o := h.stdout(eid, "n1.attacker")).endswith("done\n") and o,
            what="the attacker's search",
        )
        assert out == "own: 1\ndone\n", out
        if user == ORDINARY:
            return
        victim_alloc = h.faults.allocation(victim_id, "victim")
        assert victim_alloc.plan is not None
        mode = stat.S_IMODE(victim_alloc.plan.root.stat().st_mode)
        assert mode == 0o710 and stat.S_IMODE(victim_alloc.plan.stdout.stat().st_mode) == 0o600
    finally:
        h.close()


LIST = r"""
trap 'echo got-term; exit 7' TERM
for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline"; echo; done 2>/dev/null \
  | grep -c 'sleep 4711[.]25'
echo listed
sleep 61 & wait
"""


@pytest.mark.parametrize(("user", "isolation"), cases(ISOLATIONS))
def test_a_pod_sees_no_other_pods_processes_and_still_gets_its_sigterm(
    user: str, isolation: Isolation
) -> None:
    """Beside the other pods' environments (refused by the kernel on a root devnet, as
    another user's), their command lines and working directories were listed in ``/proc``.
    A pod has a PID namespace of its own — on a root devnet with namespace isolation and on
    an ordinary user's — and sees none of another pod's processes. Its init passes
    ``docker stop``'s SIGTERM on: the command's trap runs and its exit code is the
    deployment's, rather than a SIGKILL at the end of the grace period."""
    if played_elsewhere(user):
        return
    victim = shell_allocation("service", "exec sleep 4711.25")
    attacker = shell_allocation("service", LIST)
    h = start_embedded(nodes=1, seed=f"pids-{user}-{isolation}", isolation=isolation)
    try:
        victim_id = h.dms.deployment.new(one_node_ensemble({"victim": victim})).ensemble_id
        assert h.wait_status(victim_id, "Running", "Failed") == "Running"
        eid = h.dms.deployment.new(one_node_ensemble({"attacker": attacker})).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        out = h.wait_for(
            lambda: (o := h.stdout(eid, "n1.attacker")).endswith("listed\n") and o,
            what="the attacker's listing",
        )
        pid_namespace = user == ORDINARY or isolation is Isolation.NAMESPACE
        assert out == ("0\nlisted\n" if pid_namespace else "1\nlisted\n"), out
        allocation = h.faults.allocation(eid, "attacker")
        h.background.call(allocation.shutdown())
        assert allocation.exit_code == 7
        assert h.stdout(eid, "n1.attacker").endswith("got-term\n")
    finally:
        h.close()


SERVE = """
import http.server as h, socket, sys
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[2])), 3).close()
    print('reached the host', flush=True)
except OSError:
    print('refused', flush=True)
class A(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Length', '5')
        self.end_headers()
        self.wfile.write(b'hello')
h.HTTPServer(('', int(sys.argv[1])), A).serve_forever()
"""


@pytest.mark.skipif(PYTHON is None, reason="the pod runs /usr/bin/python3")
@pytest.mark.parametrize("user", USERS)
def test_a_pod_with_a_port_and_an_http_check_is_reached_yet_reaches_nothing_of_the_host(
    user: str,
) -> None:
    """A pod with ports, or an HTTP check, used to share the host's network on an ordinary
    user's devnet (the devnet relays and checks from its own namespace): it reached what
    listens on the host's loopback. Now it has a network of its own there too — its public
    port still reaches its server, its HTTP check still passes, and a host service on
    127.0.0.1 is out of its reach."""
    if played_elsewhere(user):
        return
    with socket.create_server(("127.0.0.1", 0)) as host_service, socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        public = free.getsockname()[1]
        free.close()
        private = 8080
        check = {"type": "http", "endpoint": f":{private}/", "interval": 10**8}
        svc = shell_allocation("service", "", healthcheck=check)
        svc["execution"]["params"]["cmd"] = [
            PYTHON,
            "-c",
            SERVE,
            str(private),
            str(host_service.getsockname()[1]),
        ]
        ports = [{"public": public, "private": private, "allocation": "svc"}]
        h = start_embedded(nodes=1, seed=f"ports-{user}")
        try:
            eid = h.dms.deployment.new(one_node_ensemble({"svc": svc}, ports=ports)).ensemble_id
            assert h.wait_status(eid, "Running", "Failed") == "Running"
            assert h.wait_for(lambda: h.stdout(eid, "n1.svc"), what="its try") == "refused\n"
            h.wait_for(lambda: _healthy(h, eid), what="the HTTP check, made inside")

            def answer() -> bytes:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{public}/", timeout=5) as r:
                        return bytes(r.read())
                except OSError:
                    return b""

            assert h.wait_for(answer, what="its server through its public port") == b"hello"
        finally:
            h.close()


# --- each pod its own identity; a deleted pod leaves nothing ----------------------------------


@needs_root
def test_each_pod_runs_as_a_user_of_its_own_freed_when_it_is_deleted() -> None:
    """Two pods, two users from the devnet's high range (not ``nobody``), each recorded
    while the pod lives; a pod's containers share theirs (they share its volumes)."""
    both = one_node_ensemble(
        {
            "a": shell_allocation("service", "id -u; exec sleep 60"),
            "b": shell_allocation("service", "id -u; exec sleep 60"),
        }
    )
    other = one_node_ensemble({"c": shell_allocation("service", "id -u; exec sleep 60")})
    h = start_embedded(nodes=1, seed="identities")
    try:
        first = h.dms.deployment.new(both).ensemble_id
        second = h.dms.deployment.new(other).ensemble_id
        for eid in (first, second):
            assert h.wait_status(eid, "Running", "Failed") == "Running"
        ids = {
            k: int(h.wait_for(lambda k=k, e=e: h.stdout(e, k).strip(), what=k))
            for e, k in ((first, "n1.a"), (first, "n1.b"), (second, "n1.c"))
        }
        assert ids["n1.a"] == ids["n1.b"] != ids["n1.c"]
        assert all(i >= IDENTITY_BASE and i != unprivileged().uid for i in ids.values())
        assert (CLAIMS_DIR / str(ids["n1.c"])).exists()
        assert h.dms.deployment.shutdown(second).ok
        h.wait_for(lambda: not (CLAIMS_DIR / str(ids["n1.c"])).exists(), what="freed")
        assert (CLAIMS_DIR / str(ids["n1.a"])).exists()
    finally:
        h.close()


@pytest.mark.parametrize(("user", "isolation"), cases(ISOLATIONS))
def test_a_deleted_pods_files_and_logs_are_removed(user: str, isolation: Isolation) -> None:
    """The issue's fourth finding: a deleted pod's sandbox and the devnet's copy of its logs
    stayed until the devnet stopped. Now its shutdown removes them, and its volumes."""
    if played_elsewhere(user):
        return
    svc = shell_allocation(
        "service",
        "head -c 100000 /dev/zero | tr '\\0' x; echo; echo x > $HOME/left; exec sleep 60",
        volume=[{"type": "local", "src": "gone-data", "mount_destination": "/gone"}],
    )
    h = start_embedded(nodes=1, seed=f"deleted-{isolation}", isolation=isolation)
    try:
        eid = h.dms.deployment.new(one_node_ensemble({"svc": svc})).ensemble_id
        assert h.wait_status(eid, "Running", "Failed") == "Running"
        h.wait_for(lambda: len(h.stdout(eid, "n1.svc")) > 100000, what="the output")
        allocation = h.faults.allocation(eid, "svc")
        assert allocation.plan is not None
        sandbox, volumes = allocation.plan.root, allocation.executor.volumes.root
        assert sandbox.exists() and (volumes / "gone-data").exists()
        assert h.dms.deployment.shutdown(eid).ok
        assert h.wait_status(eid, "Completed") == "Completed"
        assert not sandbox.exists()
        assert not (volumes / "gone-data").exists()
    finally:
        h.close()


@pytest.mark.parametrize("user", USERS)
async def test_a_devnet_that_cannot_keep_pods_apart_warns_what_no_longer_holds(
    user: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without network namespaces the devnet says at start which boundaries are gone; with
    them it warns of nothing; and, run by an ordinary user where the kernel refuses that user
    namespaces, it says that its pods run as its own user, unseparated, on the host's
    network."""
    if played_elsewhere(user):
        return
    caplog.set_level(logging.WARNING, logger="dmsgw.devnet.devnet")

    async def warnings_of(devnet: Devnet) -> list[str]:
        caplog.clear()
        await devnet.start()
        await devnet.stop()
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    shared = await warnings_of(Devnet(nodes=1, seed="shared", network_namespaces=False))
    assert [w for w in shared if "no network namespaces: pods share the host's network" in w]
    assert not [w for w in shared if "not root" in w]
    contained = await warnings_of(Devnet(nodes=1, seed="contained"))
    assert contained == [] or (user == "root" and not NAMESPACES_POSSIBLE), contained
    if user == "root":
        return
    monkeypatch.setattr(UserNamespaces, "probe", _refused)
    refused = await warnings_of(Devnet(nodes=1, seed="refused"))
    assert [w for w in refused if "this kernel refuses this user namespaces" in w], refused
    assert [w for w in refused if "pods share the host's network" in w], refused


async def _refused(self: UserNamespaces) -> tuple[bool, bool]:
    return False, False


def test_the_ids_a_dead_devnet_held_are_freed_by_the_next(tmp_path: Path) -> None:
    """A devnet killed with SIGKILL leaves its claims; the next one frees them, never a live
    devnet's."""
    dead, live = (
        "dmsgw-devnet-1.1-dead",
        f"dmsgw-devnet-{os.getpid()}.{process_start_time(os.getpid())}-live",
    )
    (tmp_path / "1879048193").write_text(dead)
    (tmp_path / "1879048194").write_text(live)
    Identities("dmsgw-devnet-new", tmp_path).remove_stale()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1879048194"]


def test_user_namespaces_hide_all_but_the_pods_own_and_never_the_systems_programs(
    tmp_path: Path,
) -> None:
    """The wrapper of an ordinary user's devnet covers the work directory but for the pod's
    own sandbox; a directory to hide that holds the system's programs (a user whose home is
    ``/``) is left alone, or no pod could run anything."""
    work = tmp_path / "work"
    (work / "other-pod").mkdir(parents=True)
    (work / "this-pod").mkdir()
    (work / "this-pod" / "file").write_text("kept")
    userns = UserNamespaces(os.geteuid(), os.getegid(), (work, Path("/")))
    script = 'ls "$0"; cat "$0/this-pod/file"; echo; ls /usr/bin/env'
    argv = userns.wrap(["/bin/sh", "-c", script, str(work)], [work / "this-pod"], network=False)
    probe = ["unshare", "--user", "--map-root-user", "true"]
    if subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode:
        pytest.skip("this kernel refuses user namespaces")
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.stdout.decode().split() == ["this-pod", "kept", "/usr/bin/env"], done.stderr
