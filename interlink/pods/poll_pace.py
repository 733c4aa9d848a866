"""How often the followed pods ask the DMS for their status, all of them together.

A followed pod asks the DMS about its deployment every ``poll_max_s`` at most, once nothing
changes (:class:`~dmsgw.interlink.records.pod_record.PodPolicy`: 5 s by default). A poll costs the
gateway CPU and the DMS a request: 10,000 pods polled every 5 s are 2,000 polls a second, and
100,000 pods 20,000, more than two cores can make (bench/README.md, "The pace of polls").
:class:`PollPace` stretches the longest wait with the number of pods followed, so
that once nothing changes they poll at most ``per_s`` times a second together: at the default
1,000 a second, the policy's 5 s up to 5,000 pods, 10 s at 10,000, 100 s at 100,000. A pod
whose status has just changed still polls again after ``poll_min_s``, and its wait grows from
there; a resumed pod's first poll is not news (decision 56).
"""

from __future__ import annotations

DEFAULT_POLLS_PER_S = 1000.0
"""Status polls a second, all followed pods together (``polls_per_s`` of ``dmsgw serve``)."""


class PollPace:
    """How many pods are followed (each from :meth:`join` to :meth:`leave`), and so how long
    each waits at most between two polls: the policy's longest wait, or longer, so that the
    pods followed poll at most ``per_s`` times a second together."""

    __slots__ = ("_followed", "_per_s")

    def __init__(self, per_s: float = DEFAULT_POLLS_PER_S) -> None:
        if not per_s > 0:
            raise ValueError(f"polls a second must be more than 0, not {per_s!r}")
        self._per_s = per_s
        self._followed = 0

    def join(self) -> None:
        """A pod begins to be followed."""
        self._followed += 1

    def leave(self) -> None:
        """A followed pod is no longer."""
        self._followed -= 1

    @property
    def followed(self) -> int:
        """The pods followed now."""
        return self._followed

    def stretched(self, longest_s: float) -> float:
        """The longest a followed pod waits between two polls, now: ``longest_s`` (the
        policy's), or longer when more pods are followed than poll that often together."""
        return max(longest_s, self._followed / self._per_s)
