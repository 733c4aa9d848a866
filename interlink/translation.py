"""How a pod becomes the ensemble its ``PodActor`` deploys: :data:`Translate`, and the error
that says a translation is not possible *yet*.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..behaviors.ensemble import EnsembleConfig
from ..errors import DmsgwError
from .bodies import RetrievedPodData


class TranslationNotReadyError(DmsgwError):
    """The pod cannot be translated *yet*: ``wait()`` fetches what is missing (the peers' GPU
    catalog, before the first ping), after which the translation is tried again. Raised by a
    :data:`Translate`; the pod actor waits instead of failing the pod."""

    def __init__(self, message: str, wait: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(message)
        self.wait = wait


Translate = Callable[[RetrievedPodData, int], EnsembleConfig]
"""``translate(pod data, generation)``: the generation (deploy attempt) is part of the ensemble.
It raises :class:`TranslationNotReadyError` when it lacks something it can fetch."""
