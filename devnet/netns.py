"""A network namespace for each allocation of the devnet.

Docker gives each container a network of its own, so two containers listen on one port
without colliding, and a published port reaches the container's address. The devnet does the
same where it can (root, ``ip`` from iproute2, and ``namespace`` isolation, whose set-up runs
as root until it drops to the allocation's user), for every allocation, ports or none: before
its process starts it makes a namespace (``ip netns add``) and a veth pair, the allocation's
end named ``eth0`` inside it, the other end in the devnet's **hub** namespace. Every
allocation gets an address of its own from :data:`POOL` (a ``/32``), and the hub's end of
every pair carries the same gateway address, :data:`GATEWAY`, with a route to that
allocation's address alone:

* the devnet's forwarder relays a public port to the allocation's address (so, as with
  Docker, a server bound to the container's 127.0.0.1 only is not reached from outside);
* the allocation's own loopback is its own (health checks run inside: :func:`in_namespace`,
  and processes join it between ``fork`` and ``exec``: :func:`~.confinement.child_setup`):
  what listens on the host's loopback — the gateway's plugin API and operator port, the
  devnet nodes' APIs — is out of its reach;
* the allocation reaches :data:`GATEWAY` in the hub, where only the devnet's relays of every
  allocation's public ports listen, and nothing else: the host's own services, even those
  bound to every address, are in the host's namespace, which the hub has no link to; there
  is no forwarding between the pairs, so a connection anywhere else fails at once ("network
  is unreachable").

The hub is the devnet's own, so its addresses are too: concurrent devnets need no lock. A
namespace is named after its devnet's working directory (``dmsgw-devnet-<pid>.<start
time>-…-<n>``, the hub ``…-hub``), so that the next devnet to start removes those a devnet
killed with SIGKILL left behind (:func:`remove_stale`), as it does their working directories.
Where namespaces cannot be made, allocations share the host's network (see
:mod:`.forwarding`); which mode runs is said in the devnet's start log line.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import ipaddress
import itertools
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .confinement import join_network_namespace, owner_gone
from .sandbox import SandboxError
from .tools import SETUP_ENVIRONMENT, have, tool

T = TypeVar("T")

log = logging.getLogger(__name__)

POOL = ipaddress.IPv4Network("10.213.0.0/16")
"""Where allocations' addresses come from (a private range Docker and Kubernetes leave alone
by default)."""
GATEWAY = "10.213.0.1"
"""The host's address on every allocation's veth: how an allocation reaches the host."""
NETNS_DIR = Path("/run/netns")
"""Where ``ip netns`` keeps its named namespaces."""
INSIDE = "eth0"
"""The allocation's end of its veth pair, named as in a Docker container."""


@dataclasses.dataclass(frozen=True)
class AllocationNamespace:
    """An allocation's network namespace and its address in it."""

    name: str
    address: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    @property
    def veth(self) -> str:
        return veth_name(self.name)


def veth_name(namespace: str) -> str:
    """The host's end of ``namespace``'s veth pair: ``dgw`` and a hash of the name (an
    interface name has at most 15 characters; a namespace's name is longer)."""
    return "dgw" + hashlib.sha256(namespace.encode()).hexdigest()[:12]


async def _ip(*args: str, batch: str = "") -> str:
    """Run ``ip`` (``batch``: commands for ``ip -batch -``); its stderr when it fails."""
    argv = [tool("ip"), *args, *(("-batch", "-") if batch else ())]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=SETUP_ENVIRONMENT,
        stdin=asyncio.subprocess.PIPE if batch else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await proc.communicate(batch.encode() or None)
    except BaseException:  # cancelled (the devnet stops): the process is not left behind
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return err.decode(errors="replace").strip() if proc.returncode else ""


def _removal(name: str) -> str:
    """``ip -force -batch`` commands removing namespace ``name`` and its veth pair (removing
    one end removes both, and the route with it; gone already is not an error)."""
    return f"link del {veth_name(name)}\nnetns del {name}\n"


class Namespaces:
    """The network namespaces of one devnet's allocations, named ``<prefix>-<n>``, and their
    hub, ``<prefix>-hub``: the namespace every allocation's veth leads to, where the
    devnet's relays of public ports listen at :data:`GATEWAY`. Nothing else listens there —
    the host's own services, bound to its addresses or to every address, are in the host's
    namespace, which no allocation has a way into."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.hub = Hub(f"{prefix}-hub")
        self._serial = itertools.count(1)
        self._free = self._addresses()
        self._released: list[str] = []

    @staticmethod
    def _addresses() -> Iterator[str]:
        """Every address of :data:`POOL` but its network, gateway and broadcast addresses
        (the pool is the devnet's own: its hub is its alone)."""
        first = int(POOL.network_address) + 2  # past the network address and the gateway
        for i in range(POOL.num_addresses - 3):
            yield str(ipaddress.IPv4Address(first + i))

    @classmethod
    async def probe(cls, prefix: str) -> Namespaces | None:
        """Namespaces for a devnet whose names start with ``prefix``, if this process can
        make a namespace and a veth pair (root, ``ip``, the kernel's and the container's
        consent); first those that devnets which no longer run left are removed. The hub is
        made here and stays until :meth:`close`."""
        if os.geteuid() != 0 or not have("ip"):
            return None
        await remove_stale()
        namespaces = cls(prefix)
        hub = namespaces.hub.name
        failed = await _ip(batch=f"netns add {hub}\n")
        failed = failed or await _ip("-n", hub, batch="link set lo up\n")
        probe = f"{prefix}-probe"
        make = f"netns add {probe}\n"
        make += f"link add {veth_name(probe)} netns {hub} type veth peer name {INSIDE} "
        make += f"netns {probe}\n"
        failed = failed or await _ip(batch=make)
        await _ip("-force", batch=f"netns del {probe}\n")
        if failed:
            log.debug("devnet: no network namespaces: %s", failed)
            await namespaces.close()
            return None
        return namespaces

    async def create(self, allocation_id: str) -> AllocationNamespace:
        """A new namespace for ``allocation_id`` with its veth pair (the other end in the
        hub), address and routes."""
        name = f"{self.prefix}-{next(self._serial)}"
        veth, hub = veth_name(name), self.hub.name
        address = self._released.pop() if self._released else next(self._free, "")
        if not address:
            raise SandboxError(f"every address of {POOL} is held by an allocation")
        host = f"netns add {name}\n"
        host += f"link add {veth} netns {hub} type veth peer name {INSIDE} netns {name}\n"
        there = f"addr add {GATEWAY}/32 dev {veth}\nlink set {veth} up\n"
        there += f"route add {address}/32 dev {veth} src {GATEWAY}\n"
        inside = "link set lo up\n"
        inside += f"addr add {address}/32 dev {INSIDE}\nlink set {INSIDE} up\n"
        inside += f"route add {GATEWAY}/32 dev {INSIDE} scope link\n"
        try:
            failed = await _ip(batch=host)
            failed = failed or await _ip("-n", hub, batch=there)
            failed = failed or await _ip("-n", name, batch=inside)
        except BaseException:
            await self.remove(AllocationNamespace(name, address))
            raise
        if failed:
            await self.remove(AllocationNamespace(name, address))
            raise SandboxError(
                f"cannot give allocation {allocation_id} a network namespace: {failed}"
            )
        return AllocationNamespace(name, address)

    async def remove(self, namespace: AllocationNamespace) -> None:
        """Remove the veth pair, the namespace, and free its address."""
        await _ip("-n", self.hub.name, "-force", batch=f"link del {veth_name(namespace.name)}\n")
        await _ip("-force", batch=_removal(namespace.name))
        if namespace.address:
            self._released.append(namespace.address)

    async def close(self) -> None:
        """Remove the hub (the devnet stops; its allocations' namespaces are gone)."""
        self.hub.close()
        await _ip("-force", batch=f"netns del {self.hub.name}\n")

    @staticmethod
    def describe() -> str:
        """The mode, for the devnet's start log line."""
        return (
            f"each allocation has its own network namespace ({POOL}), whose only way out "
            f"leads to the devnet's relays of public ports at {GATEWAY}"
        )


class Hub:
    """The hub namespace, and a thread that lives in it, on which the devnet makes the
    sockets that must be there: its listeners at :data:`GATEWAY` and its connections to
    allocations' addresses (a socket stays in the namespace it was made in, whichever
    thread then uses it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    async def socket(self, call: Callable[[], socket.socket]) -> socket.socket:
        """``call()`` (which makes a socket) run in the hub."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=self.name, initializer=self._join
            )
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def _join(self) -> None:
        fd = os.open(NETNS_DIR / self.name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            join_network_namespace(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None


async def remove_stale(directory: Path = NETNS_DIR) -> None:
    """Remove the namespaces (and veth pairs) of devnets that no longer run."""
    with contextlib.suppress(OSError):
        stale = [e.name for e in directory.iterdir() if owner_gone(e.name)]
        if stale:
            log.info("devnet: removing network namespaces left by devnets: %s", ", ".join(stale))
            await _ip("-force", batch="".join(map(_removal, stale)))


async def in_namespace(namespace: AllocationNamespace, call: Callable[[], T]) -> T:
    """``call()`` run in ``namespace``: on a thread of its own that joins it (a thread's
    namespace is its own, and this one ends with the call, so no other work runs there)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], T]) -> None:
        try:
            result = outcome()
        except BaseException as exc:  # handed to the awaiting task
            loop.call_soon_threadsafe(_fail, done, exc)
        else:
            loop.call_soon_threadsafe(_succeed, done, result)

    def run() -> None:
        def joined() -> T:
            fd = os.open(namespace.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                join_network_namespace(fd)
            finally:
                os.close(fd)
            return call()

        settle(joined)

    threading.Thread(target=run, name=f"in {namespace.name}", daemon=True).start()
    return await done


def _succeed(future: asyncio.Future[T], result: T) -> None:
    if not future.done():
        future.set_result(result)


def _fail(future: asyncio.Future[T], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
