"""Stable names for actors whose refs change: a restarted actor is a new pykka actor, so
callers address it by name and the registry always holds the current ref."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka

from ..errors import DmsgwError
from .base import Ref
from .sharded import ShardedDict

log = logging.getLogger(__name__)


class NoSuchActorError(DmsgwError):
    """Nothing is registered under that name (never started, or stopped for good)."""


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A message that reached no actor, and why."""

    recipient: str
    message: Any
    reason: str


DeadLetterHook = Callable[[DeadLetter], None]


def log_dead_letter(letter: DeadLetter) -> None:
    log.warning("dead letter to %s (%s): %r", letter.recipient, letter.reason, letter.message)


class Registry:
    """Thread-safe name → ref map with dead-letter reporting (O(1), unlike pykka's registry)."""

    def __init__(self, on_dead_letter: DeadLetterHook = log_dead_letter) -> None:
        self._refs: ShardedDict[str, Ref] = ShardedDict()
        self._lock = threading.Lock()
        self.on_dead_letter = on_dead_letter

    def register(self, name: str, ref: Ref) -> None:
        with self._lock:
            self._refs[name] = ref

    def unregister(self, name: str, ref: Ref | None = None) -> None:
        """Forget ``name`` (only if it still points at ``ref``, when given)."""
        with self._lock:
            if ref is None or self._refs.get(name) is ref:
                self._refs.pop(name, None)

    def get(self, name: str) -> Ref | None:
        with self._lock:
            return self._refs.get(name)

    def require(self, name: str) -> Ref:
        ref = self.get(name)
        if ref is None:
            raise NoSuchActorError(f"no actor named {name!r}")
        return ref

    def names(self) -> list[str]:
        with self._lock:
            return list(self._refs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._refs)

    def tell(self, name: str, message: Any) -> bool:
        """Deliver ``message``; report it as a dead letter when nobody can take it.

        A full mailbox is not a dead letter: :class:`~dmsgw.actors.base.MailboxFullError`
        reaches the caller, who must slow down.
        """
        ref = self.get(name)
        if ref is None:
            self.on_dead_letter(DeadLetter(name, message, "no such actor"))
            return False
        try:
            ref.tell(message)
        except pykka.ActorDeadError:
            self.on_dead_letter(DeadLetter(name, message, "actor is not running"))
            return False
        return True
