"""How a pod becomes the ensemble its ``PodActor`` deploys: :data:`Translate`, the error that
says a translation is not possible *yet*, and the gateway's :class:`Translator`, which
translates against the GPU classes the DMS peers report.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...behaviors.ensemble import EnsembleConfig
from ...errors import DmsgwError
from ..capacity.resource_actor import GpuCatalog
from ..plugin_errors import PluginRequestError
from ..translate import PodTranslationError, TranslationOptions, pod_to_ensemble
from ..wire.bodies import RetrievedPodData

log = logging.getLogger(__name__)


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


class Translator:
    """Pods translated against the GPU classes the peers report (its :class:`GpuCatalog`,
    which the ``ResourceActor`` fills). Until that catalog has been loaded once (by a ping, or
    by ``load``), a pod that does not translate may only lack it (a GPU pod resumed after a
    restart, before interLink's first ping): it waits for the catalog and is translated again,
    instead of failing for good."""

    def __init__(
        self,
        catalog: GpuCatalog,
        load: Callable[[], Awaitable[Any]],
        *,
        defaults: TranslationOptions | None = None,
    ) -> None:
        self.catalog = catalog
        self._load = load
        self._defaults = defaults or TranslationOptions()
        """The options every pod shares (what a container without requests gets)."""

    def __call__(self, data: RetrievedPodData, generation: int) -> EnsembleConfig:
        models = dict(self.catalog.models)
        options = dataclasses.replace(self._defaults, generation=generation, gpu_models=models)
        try:
            return pod_to_ensemble(data, options=options)
        except PodTranslationError as exc:
            if self.catalog.loaded:
                raise
            raise TranslationNotReadyError(
                f"waiting for the DMS peers' GPU catalog to translate the pod ({exc})", self._load
            ) from None


def refuse_what_cannot_run(
    translate: Translate, pods: Sequence[RetrievedPodData]
) -> dict[str, EnsembleConfig]:
    """Refuse at ``/create`` (400, naming the pod and the field) every pod that could only
    fail later: each is translated as its first attempt would be, before any is taken on. A
    pod that cannot be translated *yet* (:class:`TranslationNotReadyError`) is taken on and
    waits, as it would have. Answers the first attempts' ensembles, by pod UID, to be passed
    on (:class:`FirstAttempts`) rather than made again."""
    ensembles = {}
    for data in pods:
        try:
            ensembles[data.pod.metadata.uid] = translate(data, 1)
        except TranslationNotReadyError:
            continue
        except PodTranslationError as exc:
            meta = data.pod.metadata
            raise PluginRequestError(f"pod {meta.namespace}/{meta.name}: {exc}") from None
        except Exception:  # a bug: the pod's actor meets it too, and its supervisor decides
            log.exception("bug translating pod %s at its create", data.pod.metadata.uid)
    return ensembles


class FirstAttempts:
    """A :data:`Translate` that hands each pod's first attempt the ensemble its ``/create``
    made (:meth:`keep`), once, and translates everything else: a create translates its pod
    once, not again in the admission queue and at the deploy. What a pod's actor never asks
    for is let go with the pod (:meth:`forget`)."""

    def __init__(self, translate: Translate) -> None:
        self._translate = translate
        self._kept: dict[str, EnsembleConfig] = {}

    def keep(self, uid: str, ensemble: EnsembleConfig | None) -> None:
        """``ensemble``: pod ``uid``'s first attempt, as its create translated it."""
        if ensemble is not None:
            self._kept[uid] = ensemble

    def forget(self, uid: str) -> None:
        self._kept.pop(uid, None)

    def __call__(self, data: RetrievedPodData, generation: int) -> EnsembleConfig:
        kept = self._kept.pop(data.pod.metadata.uid, None)
        if kept is not None and generation == 1:
            return kept
        return self._translate(data, generation)
