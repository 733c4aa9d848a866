"""Attack tests played twice: by a devnet run as root, and by one run as an ordinary user.

A test parametrised over :data:`USERS` calls :func:`played_elsewhere` first. As root, its
``ordinary user`` case runs the very same test again in a child pytest whose user is
``nobody`` (switched by ``setpriv``, with a home of its own), and passes when that run passes;
as an ordinary user, the case runs here and the ``root`` one is skipped. Where the kernel
refuses that user namespaces the ordinary user's case is skipped: its devnet then only warns
(the warning itself is tested with the refusal played).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dmsgw.devnet.confinement import unprivileged
from dmsgw.devnet.sandbox import Isolation

ROOT = os.geteuid() == 0
ORDINARY = "ordinary-user"
USERS = ["root", ORDINARY]
CHECKOUT = Path(__file__).resolve().parents[2]
"""The repository, whose parent directory makes it importable as ``dmsgw``."""
RERUN_TIMEOUT_S = 150
"""The child pytest's bound (the test's own timeout is the default 180 s)."""


def cases(isolations: list[Isolation]) -> list[tuple[str, Isolation]]:
    """``(user, isolation)`` for each isolation root can have, and ``rewrite`` (the only one
    an ordinary user has) for the ordinary user: the same list as root and as that user."""
    return [*(("root", i) for i in isolations), (ORDINARY, Isolation.REWRITE)]


def played_elsewhere(user: str) -> bool:
    """Whether the current test's case for ``user`` is played by another process (and has
    passed there): the test returns at once. Skips the ``root`` case when not root."""
    if user == "root":
        if not ROOT:
            pytest.skip("the root case needs root")
        return False
    if not ROOT:
        return False
    if not _user_namespaces_for(unprivileged().uid):
        pytest.skip("this kernel refuses ordinary users namespaces (the devnet warns so)")
    if not _readable_by(unprivileged().uid):
        pytest.skip(f"user nobody cannot read this checkout or its Python packages ({CHECKOUT})")
    nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    _rerun_as_ordinary_user(nodeid)
    return True


def _readable_by(uid: int) -> bool:
    """Whether user ``uid`` can import the package and pytest as the child run would (a
    checkout in a private home cannot be played by another user)."""
    probe = ["setpriv", f"--reuid={uid}", "--clear-groups", "--", *_python("import dmsgw")]
    done = subprocess.run(probe, cwd=CHECKOUT, capture_output=True, timeout=60, check=False)
    return done.returncode == 0


def _user_namespaces_for(uid: int) -> bool:
    """Whether user ``uid`` may make user namespaces here (what the ordinary user's case
    is about: where it may not, the devnet only warns)."""
    probe = ["setpriv", f"--reuid={uid}", "--clear-groups", "unshare", "--user", "true"]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def _python(program: str) -> list[str]:
    """``program`` (which uses ``pytest``) run by an interpreter ``nobody`` can run (the test
    environment's may live in root's home), with this environment's packages."""
    system = Path("/usr/bin/python3")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = subprocess.run([system, "--version"], capture_output=True, check=False).stdout
    python = str(system) if found.decode().startswith(f"Python {version}.") else sys.executable
    packages = [p for p in sys.path if p.endswith("site-packages")]
    setup = f"import site, sys; [site.addsitedir(p) for p in {packages!r}]; import pytest; "
    return [python, "-c", setup + program]


def _rerun_as_ordinary_user(nodeid: str) -> None:
    """Run test ``nodeid`` as ``nobody`` in a child pytest; fail with its output if it fails."""
    nobody = unprivileged()
    home = Path(tempfile.mkdtemp(prefix="dmsgw-ordinary-home-"))
    os.chown(home, nobody.uid, nobody.gid)
    as_nobody = ["setpriv", f"--reuid={nobody.uid}", f"--regid={nobody.gid}", "--clear-groups"]
    options = [nodeid, "-x", "-p", "no:cacheprovider", f"--timeout={RERUN_TIMEOUT_S}"]
    argv = [*as_nobody, "--", *_python(f"sys.exit(pytest.main({options!r}))")]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C.UTF-8"}
    if "PYTHONPATH" in os.environ:  # where this run found the package
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    try:
        done = subprocess.run(
            argv,
            cwd=CHECKOUT,
            env=env,
            capture_output=True,
            timeout=RERUN_TIMEOUT_S + 20,
            check=False,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0, f"as uid {nobody.uid} the test failed:\n{output[-6000:]}"
    assert " passed" in output and " skipped" not in output, output[-3000:]
