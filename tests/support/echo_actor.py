"""An actor that echoes what it is sent, crashes on request and can be held at a gate: what the
runtime's tests and the supervision tests under load start as children."""

from __future__ import annotations

import threading
from typing import Any

from dmsgw.actors.base import Actor

WAIT = 10.0  # upper bound on waiting for an actor event; never reached when things work


class Echo(Actor):
    """Answers ``("echo", message)``; ``"crash"`` raises; ``"wait"`` (and :meth:`slow`) hold
    the actor at ``gate`` until the test opens it."""

    def __init__(
        self,
        gate: threading.Event | None = None,
        entered: threading.Event | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gate = gate
        self.entered = entered or threading.Event()

    def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("boom")
        if message == "wait" and self.gate is not None:
            self.entered.set()
            self.gate.wait(WAIT)
        return ("echo", message)

    def slow(self, value: int) -> int:
        assert self.gate is not None
        self.gate.wait(WAIT)
        return value * 2
