"""Go's ``strings.EqualFold``, as a key: how ``encoding/json`` matches keys to field names."""

from __future__ import annotations

import functools

__all__ = ["fold"]

# Simple case folding pairs newer than Python 3.11's Unicode 14 tables (Unicode 15.0, which
# Go >= 1.21 uses): CaseFolding.txt status S entries for precomposed Greek and a ligature.
_FOLD_UNICODE15 = {"\u1fd3": "\u0390", "\u1fe3": "\u03b0", "\ufb05": "\ufb06"}


@functools.lru_cache(maxsize=4096)
def _simple_fold(c: str) -> str:
    """A representative of ``c``'s ``unicode.SimpleFold`` orbit (simple case folding, C + S).

    ``str.casefold`` is *full* folding (``"ß"`` -> ``"ss"``); where that yields several characters
    the simple folding is the single-character lowercase mapping (status S, e.g. U+1E9E -> U+00DF)
    if there is one, else the character itself (``ß``, ``İ`` and ``ŉ`` fold only to themselves).
    """
    if c in _FOLD_UNICODE15:
        return _FOLD_UNICODE15[c]
    folded = c.casefold()
    if len(folded) == 1:
        return folded
    lower = c.lower()
    return lower if len(lower) == 1 else c


def fold(name: str) -> str:
    """Folds ``name`` so that ``fold(a) == fold(b)`` exactly when Go's ``strings.EqualFold``.

    ``EqualFold`` compares rune by rune under Unicode simple case folding: ``"k"`` matches the
    Kelvin sign U+212A and ``"s"`` the long s U+017F, but ``"ss"`` never matches ``"ß"``.
    """
    if name.isascii():
        return name.lower()
    return "".join(_simple_fold(c) for c in name)
