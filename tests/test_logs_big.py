"""Logs of a large output (issue 26, item 11): ``Tail`` reads from the end and ``Bytes`` from
the start, never the whole file, and both give exactly what reading it whole gives."""

from __future__ import annotations

import contextlib
import random
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dmsgw.interlink.logs.dms_logs import read_logs
from dmsgw.interlink.wire.bodies import ContainerLogOpts

START, EXIT = b"dmsgw.io/started\n", b"dmsgw.io/exit-code=%d\n"
BIG = 40 * 1024 * 1024


def _fetch(directory: Path) -> contextlib.AbstractAsyncContextManager[Path]:
    @contextlib.asynccontextmanager
    async def fetch() -> AsyncIterator[Path]:
        yield directory

    return fetch()


async def _read(directory: Path, **opts: int) -> bytes:
    chunks = read_logs(lambda: _fetch(directory), ContainerLogOpts(**opts), running=lambda: False)
    return b"".join([c async for c in chunks])


@pytest.mark.parametrize("opts", [{"Tail": 3}, {"Bytes": 10}, {"Tail": 1, "Bytes": 4}])
async def test_a_big_log_is_not_read_whole(tmp_path: Path, opts: dict[str, int]) -> None:
    line = b"a line of output that is about sixty bytes long............\n"
    with (tmp_path / "stdout.log").open("wb") as f:
        for _ in range(BIG // (len(line) * 1024)):
            f.write(line * 1024)
        f.write(b"the end\n")
    (tmp_path / "stderr.log").write_bytes(START + b"last words\n" + EXIT % 1)
    tracemalloc.start()
    try:
        shown = await _read(tmp_path, **opts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BIG // 8, f"{peak} bytes held to read {opts}"
    expected = {
        "Tail": line * 1 + b"the end\nlast words\n",
        "Bytes": line[:10],
    }
    if opts == {"Tail": 3}:
        assert shown == expected["Tail"]
    elif opts == {"Bytes": 10}:
        assert shown == expected["Bytes"]
    else:
        assert shown == b"last"


def _whole(directory: Path, tail: int, limit: int) -> bytes:
    """What the options select, reading every file whole (the rule, stated plainly)."""
    from dmsgw.interlink.translate.run_markers import strip_marker

    lines = (directory / "stdout.log").read_bytes().splitlines(keepends=True)
    lines += [
        kept
        for text in (directory / "stderr.log").read_bytes().splitlines(keepends=True)
        if (kept := strip_marker(text))
    ]
    chosen = b"".join(lines[-tail:] if tail else lines)
    return chosen[:limit] if limit else chosen


@pytest.mark.parametrize("seed", range(40))
async def test_reading_a_part_gives_what_reading_it_whole_gives(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)

    def text(markers: bool) -> bytes:
        parts = []
        for _ in range(rng.randrange(0, 3000)):
            if markers and rng.random() < 0.05:
                parts.append(rng.choice([START, EXIT % rng.randrange(256)]))
            else:
                parts.append(b"x" * rng.randrange(0, 200) + b"\n")
        if rng.random() < 0.3:
            parts.append(b"unterminated")
        return b"".join(parts)

    (tmp_path / "stdout.log").write_bytes(text(False))
    (tmp_path / "stderr.log").write_bytes(text(True))
    tail = rng.choice([0, 1, 2, 5, 50, 2000, 10000])
    limit = rng.choice([0, 1, 10, 1000, 100_000, 10_000_000])
    opts = {"Tail": tail, "Bytes": limit}
    assert await _read(tmp_path, **opts) == _whole(tmp_path, tail, limit), opts


async def test_a_follow_of_a_big_log_starts_with_its_last_line_and_goes_on(tmp_path: Path) -> None:
    """``Follow`` with ``Tail: 1`` (issue 26, item 11): the first chunk is the last line, read
    from the end (it took 43 s when the whole output was read first), then what the running
    container writes, until it ends."""
    line = b"a line of output that is about sixty bytes long............\n"
    with (tmp_path / "stdout.log").open("wb") as f:
        for _ in range(BIG // (len(line) * 1024)):
            f.write(line * 1024)
        f.write(b"the last line so far\n")
    (tmp_path / "stderr.log").write_bytes(START)
    ended = False
    opts = ContainerLogOpts(Tail=1, Follow=True)
    chunks = read_logs(lambda: _fetch(tmp_path), opts, running=lambda: not ended)
    tracemalloc.start()
    try:
        first = await anext(chunks)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == b"the last line so far\n"
    assert peak < BIG // 8, f"{peak} bytes held to start the follow"
    with (tmp_path / "stdout.log").open("ab") as f:
        f.write(b"written while followed\n")
    assert await anext(chunks) == b"written while followed\n"
    ended = True
    assert [c async for c in chunks] == []
