"""A network namespace for each allocation of the devnet that publishes ports.

Docker gives each container a network of its own, so two containers listen on one port
without colliding, and a published port reaches the container's address. The devnet does the
same where it can (root, ``ip`` from iproute2, and ``namespace`` isolation, whose set-up runs
as root until it drops to the allocation's user): before the allocation's process starts it
makes a namespace (``ip netns add``) and a veth pair, the allocation's end named ``eth0``
inside it. Every allocation gets an address of its own from :data:`POOL` (a ``/32``), and the
host's end of every pair carries the same gateway address, :data:`GATEWAY`, with a route to
that allocation's address alone:

* the devnet's forwarder relays a public port to the allocation's address (so, as with
  Docker, a server bound to the container's 127.0.0.1 only is not reached from outside);
* the allocation's own loopback is its own (health checks run inside: :func:`in_namespace`,
  and processes join it between ``fork`` and ``exec``: :func:`~.confinement.child_setup`);
* the allocation reaches the host at :data:`GATEWAY` (services listening on every address,
  and every allocation's public ports, which the forwarder also opens there), and nothing
  beyond the host: there is no NAT and no forwarding between the pairs, so it has a route to
  the gateway only, and a connection anywhere else fails at once ("network is unreachable")
  rather than waiting for packets the host would drop.

An address is claimed by adding its host route, which the kernel refuses for an address
another devnet of the host already routes, so concurrent devnets need no lock. A namespace is
named after its devnet's working directory (``dmsgw-devnet-<pid>.<start time>-…-<n>``) and its
veth after a hash of that name, so that the next devnet to start removes those a devnet
killed with SIGKILL left behind (:func:`remove_stale`), as it does their working directories.
Where namespaces cannot be made, allocations share the host's network (see
:mod:`.forwarding`); which mode runs is said in the devnet's start log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import ipaddress
import itertools
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .confinement import join_network_namespace, owner_gone
from .sandbox import SandboxError

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
_EXISTS = "File exists"
"""How ``ip`` says that a route (here: an address another allocation holds) exists."""


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
    argv = ["ip", *args, *(("-batch", "-") if batch else ())]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if batch else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate(batch.encode() or None)
    return err.decode(errors="replace").strip() if proc.returncode else ""


def _removal(name: str) -> str:
    """``ip -force -batch`` commands removing namespace ``name`` and its veth pair (removing
    one end removes both, and the route with it; gone already is not an error)."""
    return f"link del {veth_name(name)}\nnetns del {name}\n"


class Namespaces:
    """The network namespaces of one devnet's allocations, named ``<prefix>-<n>``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._serial = itertools.count(1)
        start = int.from_bytes(hashlib.sha256(prefix.encode()).digest()[:4], "big")
        self._candidates = self._addresses(start)

    @staticmethod
    def _addresses(start: int) -> Iterator[str]:
        """Every address of :data:`POOL` but its network, gateway and broadcast addresses,
        from ``start`` on, round and round (concurrent devnets start at different places)."""
        first = int(POOL.network_address) + 2  # past the network address and the gateway
        count = POOL.num_addresses - 3
        for i in itertools.count():
            yield str(ipaddress.IPv4Address(first + (start + i) % count))

    @classmethod
    async def probe(cls, prefix: str) -> Namespaces | None:
        """Namespaces for a devnet whose names start with ``prefix``, if this process can
        make a namespace and a veth pair (root, ``ip``, the kernel's and the container's
        consent); first those that devnets which no longer run left are removed."""
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return None
        await remove_stale()
        probe = f"{prefix}-probe"
        make = f"netns add {probe}\nlink add {veth_name(probe)} type veth peer name {INSIDE} "
        make += f"netns {probe}\n"
        failed = await _ip(batch=make)
        await _ip("-force", batch=_removal(probe))
        if failed:
            log.debug("devnet: no network namespaces: %s", failed)
            return None
        return cls(prefix)

    async def create(self, allocation_id: str) -> AllocationNamespace:
        """A new namespace for ``allocation_id`` with its veth pair, address and route."""
        name = f"{self.prefix}-{next(self._serial)}"
        veth = veth_name(name)
        host = f"netns add {name}\nlink add {veth} type veth peer name {INSIDE} netns {name}\n"
        host += f"addr add {GATEWAY}/32 dev {veth}\nlink set {veth} up\n"
        try:
            failed = await _ip(batch=host)
            address = "" if failed else await self._claim(veth)
            if not failed:
                inside = "link set lo up\n"
                inside += f"addr add {address}/32 dev {INSIDE}\nlink set {INSIDE} up\n"
                inside += f"route add {GATEWAY}/32 dev {INSIDE} scope link\n"
                failed = await _ip("-n", name, batch=inside)
        except BaseException:
            await self.remove(AllocationNamespace(name, ""))
            raise
        if failed:
            await self.remove(AllocationNamespace(name, ""))
            raise SandboxError(
                f"cannot give allocation {allocation_id} a network namespace: {failed}"
            )
        return AllocationNamespace(name, address)

    async def _claim(self, veth: str) -> str:
        """An address of the pool that no allocation of this host holds, routed to ``veth``:
        adding the route is the claim (refused for an address routed already)."""
        for _ in range(POOL.num_addresses):
            address = next(self._candidates)
            failed = await _ip("route", "add", f"{address}/32", "dev", veth, "src", GATEWAY)
            if not failed:
                return address
            if _EXISTS not in failed:
                raise SandboxError(f"cannot route {address} to its allocation: {failed}")
        raise SandboxError(f"every address of {POOL} is held by an allocation")

    @staticmethod
    async def remove(namespace: AllocationNamespace) -> None:
        """Remove the namespace, its veth pair and its route."""
        await _ip("-force", batch=_removal(namespace.name))

    @staticmethod
    def describe() -> str:
        """The mode, for the devnet's start log line."""
        return (
            f"each allocation with ports has its own network namespace ({POOL}, the host at "
            f"{GATEWAY})"
        )


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
