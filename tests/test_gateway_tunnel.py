"""interLink's service exposure end to end on the embedded devnet: a pod serving a port is
reached through the tunnel its ``interlink.eu/wstunnel-client-commands`` annotation opens.

wstunnel cannot be downloaded here, so the annotation's client command is a small relay
(:data:`RELAY`) standing in for ``wstunnel client -R tcp://0.0.0.0:<port>:localhost:<port>``:
it connects out to a listener of the test (which plays the in-cluster wstunnel server and the
Service behind it) and forwards what comes through to the pod's port on ``localhost``. With
network namespaces the allocation's only way out leads to the devnet's hub, so the listener is
made there (at its gateway address); on a shared network it is on the host's loopback. The
relay runs in the container's allocation, as the pod's user, beside the server; the test asks
through its listener and gets the pod's answer, which carries ``POD_IP`` from
``interlink.eu/pod-ip``. A tunnel that ends shows in the container's status and log and,
under ``restartPolicy: Always``, starts again with the container.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmsgw.devnet.netns import GATEWAY
from dmsgw.interlink.translate.pod_network import POD_IP_ANNOTATION, TUNNEL_ANNOTATION
from tests.support.devnet_gateways import PYTHON, Serving, needs_python, serving
from tests.support.gateway_fakes import WAIT_S, pod, uid, until_async

RELAY = """
import socket, sys, threading, time
server, local = (sys.argv[1], int(sys.argv[2])), ('127.0.0.1', int(sys.argv[3]))
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
print('relay: forwarding %s:%d to localhost:%d' % (*server, local[1]), flush=True)
while True:
    try:
        up = socket.create_connection(server)
    except OSError:
        time.sleep(0.2)
        continue
    first = up.recv(65536)
    while True:
        try:
            down = socket.create_connection(local)
            break
        except OSError:
            time.sleep(0.2)
    down.sendall(first)
    threading.Thread(target=pipe, args=(down, up), daemon=True).start()
    pipe(up, down)
"""
"""Stands in for wstunnel's client: connect to the server (argv 1-2), and forward each
connection it opens to the local port (argv 3), one after the other."""

SERVER = """
import http.server as h, os, sys
class A(h.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ('hello through the tunnel from ' + os.environ['POD_IP']).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
h.HTTPServer(('127.0.0.1', int(sys.argv[1])), A).serve_forever()
"""
"""The pod's server, on the container's own 127.0.0.1 only (where the tunnel forwards)."""

POD_IP = "10.244.7.9"
IP_FREEBIND = 15
"""Linux's ``IP_FREEBIND`` (``socket`` does not name it)."""


def _tunnelled_pod(n: int, port: int, public: int, tunnel: str) -> dict[str, Any]:
    spec = pod(
        uid(n),
        command=[PYTHON, "-c", SERVER, str(port)],
        ports=[{"name": "http", "containerPort": port, "hostPort": public}],
    )
    spec["metadata"]["annotations"].update({TUNNEL_ANNOTATION: tunnel, POD_IP_ANNOTATION: POD_IP})
    return spec


async def _listener(s: Serving) -> socket.socket:
    """The test's listener where the pod's tunnel can reach it: in the devnet's hub when
    allocations have network namespaces, else on the host's loopback."""
    namespaces = s.devnet.networks.namespaces
    if namespaces is None:
        return socket.create_server(("127.0.0.1", 0))
    return await namespaces.hub.socket(_at_the_hubs_gateway)


def _at_the_hubs_gateway() -> socket.socket:
    """A listener at the hub's address, which exists once an allocation's veth does (so it
    binds freely, as the devnet's own relays there do)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    sock.bind((GATEWAY, 0))
    sock.listen()
    return sock


async def _ask(listener: socket.socket) -> bytes:
    """A GET through the tunnel: the relay's next connection to the listener carries it."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    conn, _ = await asyncio.wait_for(loop.sock_accept(listener), WAIT_S)
    with conn:
        await loop.sock_sendall(conn, b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")
        answer = b""
        while chunk := await asyncio.wait_for(loop.sock_recv(conn, 65536), WAIT_S):
            answer += chunk
    return answer


async def _container(s: Serving, spec: dict[str, Any]) -> dict[str, Any]:
    (status,) = await (await s.plugin.get("/status", data=json.dumps([spec]))).json()
    return dict(status["containers"][0])


async def _logs(s: Serving, spec: dict[str, Any]) -> str:
    meta = spec["metadata"]
    request = {"Namespace": meta["namespace"], "PodUID": meta["uid"], "PodName": meta["name"]}
    answer = await s.plugin.get("/getLogs", data=json.dumps({**request, "ContainerName": "main"}))
    assert answer.status == 200, await answer.text()
    return await answer.text()


@needs_python
async def test_a_pods_port_is_reached_through_the_tunnel_its_annotation_opens(
    tmp_path: Path, unused_tcp_port_factory: Callable[[], int]
) -> None:
    port, public = unused_tcp_port_factory(), unused_tcp_port_factory()
    async with serving(tmp_path) as s:
        with await _listener(s) as listener:
            address, there = listener.getsockname()[:2]
            relay = shlex.join([PYTHON, "-c", RELAY, address, str(there), str(port)])
            spec = _tunnelled_pod(1, port, public, f"exec {relay}")
            await s.create(spec)
            answer = await _ask(listener)
            assert answer.startswith(b"HTTP/1.0 200"), answer
            assert answer.endswith(f"hello through the tunnel from {POD_IP}".encode())
            again = await _ask(listener)  # the tunnel lives on: a second request
            assert again.endswith(f"from {POD_IP}".encode())
            assert "running" in (await _container(s, spec))["state"]
            shown = await _logs(s, spec)
            assert f"relay: forwarding {address}:{there} to localhost:{port}" in shown
            assert (await s.plugin.post("/delete", data=json.dumps(spec))).status == 200


@needs_python
async def test_a_tunnel_that_ends_shows_in_the_pods_status_and_log(
    tmp_path: Path, unused_tcp_port_factory: Callable[[], int]
) -> None:
    """A tunnel that cannot start (its client exits) stops the container, as a failed liveness
    probe does: under ``restartPolicy: Never`` it is terminated with the reason in its
    message, and its log has the client's own words and the gateway's."""
    port, public = unused_tcp_port_factory(), unused_tcp_port_factory()
    tunnel = "echo 'wstunnel: cannot connect to ws://tunnel.example:80' >&2; exit 3"
    spec = _tunnelled_pod(2, port, public, tunnel)
    spec["spec"]["terminationGracePeriodSeconds"] = 1
    async with serving(tmp_path) as s:
        await s.create(spec)

        async def terminated() -> bool:
            return "terminated" in (await _container(s, spec))["state"]

        await until_async(terminated, "the container ends")
        ended = (await _container(s, spec))["state"]["terminated"]
        assert (ended["exitCode"], ended["reason"]) == (143, "Error"), ended
        assert ended["message"] == (
            f"killed by the gateway: its tunnel failed: {TUNNEL_ANNOTATION} ended with status 3; "
            "its output is in the container's log"
        )
        shown = await _logs(s, spec)
        assert "wstunnel: cannot connect to ws://tunnel.example:80" in shown
        assert "dmsgw: the tunnel ended with status 3; stopping the container" in shown
        assert "dmsgw.io/probe" not in shown
        assert (await s.plugin.post("/delete", data=json.dumps(spec))).status == 200


@needs_python
async def test_under_always_a_tunnel_that_ended_is_started_again_with_its_container(
    tmp_path: Path, unused_tcp_port_factory: Callable[[], int], host_dir: Path
) -> None:
    """The first run's tunnel ends; the container is restarted, tunnel included, and its last
    state says why the previous run ended."""
    port, public = unused_tcp_port_factory(), unused_tcp_port_factory()
    once = shlex.quote(str(host_dir / "failed-once"))
    tunnel = f"[ -e {once} ] && exec sleep 600; touch {once}; exit 4"
    spec = _tunnelled_pod(3, port, public, tunnel)
    spec["spec"].update(restartPolicy="Always", terminationGracePeriodSeconds=1)
    async with serving(tmp_path) as s:
        await s.create(spec)

        async def running_again() -> bool:
            container = await _container(s, spec)
            return container["restartCount"] >= 1 and "running" in container["state"]

        await until_async(running_again, "the container runs again")
        last = (await _container(s, spec))["lastState"]["terminated"]
        assert last["message"] == (
            f"killed by the gateway: its tunnel failed: {TUNNEL_ANNOTATION} ended with status 4; "
            "its output is in the container's log"
        )
        assert (await s.plugin.post("/delete", data=json.dumps(spec))).status == 200
