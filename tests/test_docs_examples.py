"""Every example in README.md and docs/ runs, as a new user would run it, so that the docs
cannot drift from the code.

The fenced blocks are read from the documents. ``sh``/``shell``/``bash`` blocks run in bash
(``set -eu``: a failing command fails the example; ``curl`` fails on an HTTP error);
``python`` blocks written as a REPL session (``>>>``) run in one Python session per document,
in order, with top-level ``await`` where they use it — what follows a prompt is the code, the
rest is output and is not compared; other ``python`` blocks are scripts, run as ``python -c``
and required to exit 0 with nothing on stderr. A document's blocks run in their order. Blocks
in other languages (``yaml``, ``text``) are not examples to run.

A block that cannot run here — it needs a real DMS, or runs until Ctrl-C — is preceded by
``<!-- not-run: the reason -->``, so skipping is visible in the document and deliberate.

The new user: an empty home directory and state directory, ``$DMS_PASSPHRASE`` set, the
checkout as working directory and ``dmsgw`` on ``PATH``; a ``dmsgw devnet up`` and a
``dmsgw serve`` running as the docs say to start them. The devnet listens on free ports, so the
addresses the docs give for it (``127.0.0.1:9990``…) are mapped to the real ones; the gateway's
plugin API is where the docs say, its default socket in the new user's home, and its operator
port a free one; nothing else in an example is changed.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELL = {"sh", "shell", "bash"}
PYTHON = {"python"}
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")
LOOKS_RUNNABLE = re.compile(r"^(\$ |>>> |dmsgw |curl |make |python )")
STARTUP_S = 30.0
EXAMPLE_S = 180.0
CURL_FAILS_ON_HTTP_ERRORS = 'curl() { command curl --fail-with-body "$@"; }\n'


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of a document."""

    doc: Path
    line: int
    lang: str
    text: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in SHELL | PYTHON and self.not_run is None


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, each with the reason of the ``not-run`` marker on the
    last non-blank line before it, if there is one."""
    found: list[Block] = []
    lines = doc.read_text().splitlines()
    before = ""
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            before = lines[i] if lines[i].strip() else before
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = NOT_RUN.fullmatch(before.strip())
        text = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(doc, i + 1, fence.group(1), text, marker.group(1) if marker else None))
        before, i = "", end + 1
    return found


ALL_BLOCKS = [b for doc in DOCUMENTS for b in blocks(doc)]


# --- the documents' own rules ------------------------------------------------------------


def test_every_skipped_example_says_why() -> None:
    markers = [
        (doc, n)
        for doc in DOCUMENTS
        for n, line in enumerate(doc.read_text().splitlines(), 1)
        if NOT_RUN.fullmatch(line.strip())
    ]
    skipped = [b for b in ALL_BLOCKS if b.not_run is not None]
    assert len(skipped) == len(markers), "a not-run marker that is not right before a block"
    for b in skipped:
        assert b.lang in SHELL | PYTHON, f"{b.where}: a not-run marker on a {b.lang!r} block"
        assert len(b.not_run or "") >= 10, f"{b.where}: say why it does not run"


def test_no_example_hides_as_a_block_without_a_language() -> None:
    for b in ALL_BLOCKS:
        if b.lang == "":
            first = b.text.lstrip().splitlines()[0] if b.text.strip() else ""
            assert not LOOKS_RUNNABLE.match(first), f"{b.where}: label it sh or python"


# --- the new user's machine --------------------------------------------------------------


@dataclasses.dataclass
class Newcomer:
    """Where the examples run: the environment, and the doc addresses mapped to real ones."""

    env: dict[str, str]
    addresses: dict[str, str]

    def mapped(self, text: str) -> str:
        for doc_address, real in self.addresses.items():
            text = text.replace(doc_address, real)
        return text


def _read_until(proc: subprocess.Popen[bytes], pattern: str) -> str:
    """``proc``'s stdout up to where ``pattern`` matches it (bounded wait)."""
    assert proc.stdout is not None
    text = ""
    while re.search(pattern, text, re.M) is None:
        ready, _, _ = select.select([proc.stdout.fileno()], [], [], STARTUP_S)
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"no {pattern!r} within {STARTUP_S} s; got {text!r}")
        text += chunk.decode()
    return text


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STARTUP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Newcomer]:
    home = tmp_path_factory.mktemp("home")
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("DMSGW_", "DMS_", "XDG_"))
    }
    env = {
        **inherited,
        "HOME": str(home),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DMS_PASSPHRASE": "a newcomer's passphrase",
        "DMSGW_TEST_SCRYPT_N": "16",  # keys written by the examples unlock fast
    }
    dmsgw = [sys.executable, "-m", "dmsgw"]
    devnet = subprocess.Popen(
        [*dmsgw, "devnet", "up", "--base-port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    serve_env = {**env, "DMSGW_OPERATOR_LISTEN": "127.0.0.1:0"}
    serve = subprocess.Popen(
        [*dmsgw, "serve", "--devnet"],
        env=serve_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        nodes = re.findall(
            r"^node\d+  http://(127\.0\.0\.1:\d+)", _read_until(devnet, "Then: "), re.M
        )
        listening = rf"^dmsgw serve: listening on unix://{re.escape(str(home))}/"
        _read_until(serve, listening)
        addresses = {f"127.0.0.1:{9990 + i}": node for i, node in enumerate(nodes)}
        yield Newcomer(env, addresses)
    finally:
        _stop(serve)
        _stop(devnet)


# --- running the examples ----------------------------------------------------------------


def _run_shell(block: Block, newcomer: Newcomer) -> None:
    script = "set -eu\n" + CURL_FAILS_ON_HTTP_ERRORS + newcomer.mapped(block.text)
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env=newcomer.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=EXAMPLE_S,
    )
    assert result.returncode == 0, (
        f"{block.where} failed ({result.returncode}):\n{block.text}\n"
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )


def _run_script(block: Block, newcomer: Newcomer) -> None:
    result = subprocess.run(
        [sys.executable, "-c", newcomer.mapped(block.text)],
        cwd=REPO,
        env={**newcomer.env, "PYTHONWARNINGS": "default"},
        capture_output=True,
        text=True,
        check=False,
        timeout=EXAMPLE_S,
    )
    assert (result.returncode, result.stderr) == (0, ""), f"{block.where}:\n{result.stderr}"


def repl_source(text: str) -> str:
    """The code of a REPL transcript: what follows the ``>>>`` and ``...`` prompts."""
    code = []
    for line in text.splitlines():
        if line.startswith((">>> ", "... ")):
            code.append(line[4:])
        elif line in (">>>", "..."):
            code.append("")
    return "\n".join(code) + "\n"


def _run_repl(block: Block, newcomer: Newcomer, session: dict[str, Any]) -> None:
    source = newcomer.mapped(repl_source(block.text))
    code = compile(source, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:  # `await` at top level: an asyncio REPL
        asyncio.run(eval(code, session))
    else:
        exec(code, session)


RUNNABLE_DOCS = [doc for doc in DOCUMENTS if any(b.runs for b in blocks(doc))]


@pytest.mark.parametrize(
    "doc", RUNNABLE_DOCS, ids=[str(d.relative_to(REPO)) for d in RUNNABLE_DOCS]
)
def test_the_examples_of(doc: Path, newcomer: Newcomer, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith(("DMSGW_", "DMS_", "XDG_"))]:
        monkeypatch.delenv(name)
    for name, value in newcomer.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(REPO)
    session: dict[str, Any] = {"__name__": "__console__"}
    try:
        for block in blocks(doc):
            if not block.runs:
                continue
            if block.lang in SHELL:
                _run_shell(block, newcomer)
            elif ">>> " in block.text:
                _run_repl(block, newcomer, session)
            else:
                _run_script(block, newcomer)
    finally:
        _close_clients(session)


def _close_clients(session: dict[str, Any]) -> None:
    from dmsgw.behaviors.session import Node

    for value in session.values():
        if isinstance(value, Node):
            value.close()
