"""A change counter that threads outside the devnet's event loop can wait on.

Every state change the devnet makes (a deployment's status, an allocation's state, resources
held or released) bumps it. A test driving the devnet from its own thread waits for the next
change instead of sleeping, then asks the DMS (through the client) what the change was.
"""

from __future__ import annotations

import threading


class ChangeFeed:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.generation = 0

    def notify(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout_s: float) -> int:
        """Block until the generation differs from ``seen`` or ``timeout_s`` passes; returns
        the generation now."""
        with self._cond:
            self._cond.wait_for(lambda: self.generation != seen, timeout_s)
            return self.generation
