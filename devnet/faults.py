"""Fault injection for tests, driven from the test's thread while the devnet runs on its own.

Every method is thread-safe: it runs on the devnet's event loop and returns when done. Faults
stay until undone: :meth:`Faults.heal` removes message rules and partitions,
:meth:`Faults.restart_node` brings a stopped node back, ``fail_behavior(..., None)`` restores a
behavior.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import DmsgwError
from .allocation import Allocation
from .devnet import BackgroundDevnet, Devnet
from .network import FaultRule

T = TypeVar("T")


class FaultError(DmsgwError):
    """A fault that names nothing in the devnet (an unknown node or allocation)."""


class Faults:
    """Breaks a running :class:`BackgroundDevnet` in the ways a real network breaks."""

    def __init__(self, background: BackgroundDevnet) -> None:
        self._background = background

    @property
    def devnet(self) -> Devnet:
        return self._background.devnet

    def _on_loop(self, action: Callable[[], T]) -> T:
        async def run() -> T:
            return action()

        return self._background.call(run())

    def _index(self, node: int) -> int:
        if not 0 <= node < len(self.devnet.nodes):
            raise FaultError(f"there is no node{node} (the devnet has {len(self.devnet.nodes)})")
        return node

    def stop_node(self, node: int) -> None:
        """The node's REST API goes away and no message reaches it or leaves it."""
        self._background.call(self.devnet.stop_node(self._index(node)))

    def restart_node(self, node: int) -> None:
        """The node comes back on the same URL with the same identity."""
        self._background.call(self.devnet.restart_node(self._index(node)))

    def allocation(self, ensemble_id: str, name: str) -> Allocation:
        """The allocation ``name`` (``job`` or its manifest key ``n1.job``) of a deployment."""
        for entry in self.devnet.nodes:
            found = entry.provider.find(ensemble_id, name) if entry.provider else None
            if found is not None:
                return found
        raise FaultError(f"no allocation {name!r} of deployment {ensemble_id} runs in the devnet")

    def kill_allocation(self, ensemble_id: str, name: str) -> int:
        """SIGKILL the allocation's process (as an OOM killer would); returns its PID."""
        allocation = self.allocation(ensemble_id, name)
        pid = allocation.pid
        if pid is None:
            raise FaultError(f"allocation {allocation.id} has no running process")
        self._on_loop(allocation.kill)
        return pid

    def drop(
        self, behavior: str = "", *, source: int | None = None, target: int | None = None
    ) -> FaultRule:
        """Lose every message matching ``behavior`` (a path prefix) from/to the given nodes."""
        return self._rule(FaultRule(behavior, self._peer(source), self._peer(target), drop=True))

    def delay(
        self,
        seconds: float,
        behavior: str = "",
        *,
        source: int | None = None,
        target: int | None = None,
    ) -> FaultRule:
        """Hold every matching message ``seconds`` before delivering it."""
        rule = FaultRule(behavior, self._peer(source), self._peer(target), delay_s=seconds)
        return self._rule(rule)

    def remove_rule(self, rule: FaultRule) -> None:
        """Undo one :meth:`drop` or :meth:`delay`."""
        self._on_loop(lambda: self.devnet.network.remove_rule(rule))

    def partition(self, side_a: list[int], side_b: list[int]) -> None:
        """Cut every link between two groups of nodes."""
        a = {self.devnet.nodes[self._index(i)].node.peer_id for i in side_a}
        b = {self.devnet.nodes[self._index(i)].node.peer_id for i in side_b}
        self._on_loop(lambda: self.devnet.network.partition(a, b))

    def heal(self) -> None:
        """Remove every message rule and partition."""
        self._on_loop(self.devnet.network.heal)

    def fail_behavior(
        self, node: int, behavior: str, error: str | None = "injected failure"
    ) -> None:
        """Make ``node`` drop ``behavior`` with ``error`` in its log (``None`` restores it)."""
        target = self.devnet.nodes[self._index(node)].node
        self._on_loop(lambda: target.fail_behavior(behavior, error))

    def _peer(self, node: int | None) -> str:
        return "" if node is None else self.devnet.nodes[self._index(node)].node.peer_id

    def _rule(self, rule: FaultRule) -> FaultRule:
        return self._on_loop(lambda: self.devnet.network.add_rule(rule))
