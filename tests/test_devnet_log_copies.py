"""The devnet's orchestrator copies an allocation's logs as of each request, adding only what
is new to a copy that holds a prefix of them, and making it afresh otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from dmsgw.devnet.log_copies import LogCopies, LogExtent
from dmsgw.devnet_files.log_times import times_path


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


async def test_a_copy_gets_the_output_as_of_the_request_and_then_only_what_is_new(
    tmp_path: Path,
) -> None:
    sandbox, copies = tmp_path / "sandbox", LogCopies()
    sandbox.mkdir()
    out, err = sandbox / "stdout.log", sandbox / "stderr.log"
    _append(out, b"one\n")
    _append(times_path(out), b"0 1\n")
    directory = tmp_path / "deployments" / "e1" / "n1.a"
    await copies.update("n1.a", directory, LogExtent.of(out), LogExtent.of(err))
    copy = directory / "stdout.log"
    assert copy.read_bytes() == b"one\n"
    assert not (directory / "stderr.log").exists()  # no output: no file, as the DMS writes
    assert times_path(copy).read_bytes() == b"0 1\n"
    inode = os.stat(copy).st_ino
    asked = LogExtent.of(out)
    _append(out, b"two\n")  # written after the request: not in this copy
    await copies.update("n1.a", directory, asked, LogExtent.of(err))
    assert copy.read_bytes() == b"one\n"
    await copies.update("n1.a", directory, LogExtent.of(out), LogExtent.of(err))
    assert copy.read_bytes() == b"one\ntwo\n"
    assert os.stat(copy).st_ino == inode  # appended to, not written again


async def test_a_copy_that_is_not_the_prefix_last_written_is_made_afresh(tmp_path: Path) -> None:
    sandbox, copies = tmp_path / "sandbox", LogCopies()
    sandbox.mkdir()
    out, err = sandbox / "stdout.log", sandbox / "stderr.log"
    out.write_bytes(b"first output\n")
    directory = tmp_path / "copy"
    await copies.update("k", directory, LogExtent.of(out), LogExtent.of(err))
    copy = directory / "stdout.log"
    copy.write_bytes(b"changed by someone else, and longer than the source\n")
    await copies.update("k", directory, LogExtent.of(out), LogExtent.of(err))
    assert copy.read_bytes() == b"first output\n"
    replacement = sandbox / "new.log"
    replacement.write_bytes(b"new\n")
    os.replace(replacement, out)  # another file at the same path, shorter
    await copies.update("k", directory, LogExtent.of(out), LogExtent.of(err))
    assert copy.read_bytes() == b"new\n"
    out.unlink()  # the sandbox removed: no output, no file written, the copy stays
    await copies.update("k", directory, LogExtent.of(out), LogExtent.of(err))
    assert copy.read_bytes() == b"new\n"
    assert [p.name for p in directory.iterdir()] == ["stdout.log"]  # no temporary left


async def test_a_reader_of_a_copy_never_sees_it_truncated(tmp_path: Path) -> None:
    """A fetch while a /getLogs reads the copy (another client than the gateway, whose own
    fetches take rounds): the copy is appended to, or made beside and renamed into place."""
    sandbox, copies = tmp_path / "sandbox", LogCopies()
    sandbox.mkdir()
    out, err = sandbox / "stdout.log", sandbox / "stderr.log"
    out.write_bytes(b"first run\n")
    await copies.update("k", tmp_path / "copy", LogExtent.of(out), LogExtent.of(err))
    copy = tmp_path / "copy" / "stdout.log"
    with copy.open("rb") as reader:
        replacement = sandbox / "new.log"
        replacement.write_bytes(b"2\n")
        os.replace(replacement, out)
        await copies.update("k", tmp_path / "copy", LogExtent.of(out), LogExtent.of(err))
        assert reader.read() == b"first run\n"
    assert copy.read_bytes() == b"2\n"
