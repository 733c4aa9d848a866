"""What a command costs the person who types it: ``dmsgw --help`` and ``dmsgw invoke``, with
and without a key agent, against Python's own start.

Each command runs as a new process, as from a shell, against the embedded devnet in its own
process. The floor is ``python -c pass`` (the interpreter's start, which every Python command
pays and nothing of ours can remove); it skips everything the command does. Reported per
command: the median wall time, the process CPU (user + system, the command's own process and
what it waited for) and the largest resident set of the command's own process.

    .venv/bin/python bench/cli.py [--rounds 9]

Targets (issue 28): ``dmsgw --help`` <= 0.2 s; a second ``dmsgw invoke /dms/node/peers/list``
in a session with an agent <= 0.3 s and <= 80 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context

KEY = Ed25519PrivKey(bytes(range(140, 172)))


_LAUNCHER = """
import json, os, statistics, subprocess, sys, time
command, rounds = json.loads(sys.argv[1]), int(sys.argv[2])
walls, cpus, rss = [], [], 0
for _ in range(rounds):
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    walls.append(time.perf_counter() - started)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{command} failed")
    cpus.append(usage.ru_utime + usage.ru_stime)
    rss = max(rss, usage.ru_maxrss)
print(json.dumps([statistics.median(walls), statistics.median(cpus), rss / 1024]))
"""
"""Runs the commands from a small process: a child's peak resident set counts the memory of
the process that forked it, and the bench's own is hundreds of MiB."""


def _measure(
    command: Sequence[str], env: dict[str, str], rounds: int
) -> tuple[float, float, float]:
    """Median wall seconds, median CPU seconds, largest RSS in MiB of ``command``."""
    launcher = [sys.executable, "-c", _LAUNCHER, json.dumps(list(command)), str(rounds)]
    done = subprocess.run(launcher, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    wall, cpu, rss = json.loads(done.stdout)
    return float(wall), float(cpu), float(rss)


def _line(name: str, figures: tuple[float, float, float], floor: tuple[float, float, float]) -> str:
    wall, cpu, rss = figures
    return (
        f"{name:<34} wall {wall * 1000:7.1f} ms ({wall / floor[0]:5.1f}x)   "
        f"CPU {cpu * 1000:7.1f} ms ({cpu / floor[1]:5.1f}x)   RSS {rss:6.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    home = Path(tempfile.mkdtemp(prefix="dmsgw-bench-cli-"))
    background = BackgroundDevnet(Devnet(1, seed="bench-cli"))
    devnet = background.start()
    agent = None
    try:
        keys, caps = home / "key", home / "cap"
        KeyStore(keys).save("gw", marshal_private_key(KEY), "pw")
        grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node", "/public"])
        caps.mkdir()
        context = CapabilityContext(provider_from_private_key(KEY), name="gw", provide=grant)
        save_context(context, directory=caps)
        (home / "run").mkdir(mode=0o700)
        env = {**os.environ, "DMSGW_AGENT_SOCK": str(home / "run" / "agent.sock")}
        env.pop("DMSGW_AGENT", None)
        dmsgw = [sys.executable, "-m", "dmsgw"]
        invoke = [*dmsgw, "invoke", "/dms/node/peers/list", "--url", devnet.urls[0]]
        invoke += ["--key", "gw", "--key-dir", str(keys), "--cap-dir", str(caps)]
        floor = _measure([sys.executable, "-c", "pass"], env, rounds)
        print(_line("python -c pass (the floor)", floor, floor))
        print(_line("dmsgw --help", _measure([*dmsgw, "--help"], env, rounds), floor))
        alone = {**env, "DMS_PASSPHRASE": "pw", "DMSGW_AGENT": "off"}
        print(_line("dmsgw invoke (no agent)", _measure(invoke, alone, rounds), floor))
        start = [*dmsgw, "agent", "start", "--foreground", "--key", "gw", "--key-dir", str(keys)]
        agent = subprocess.Popen(
            start, env={**env, "DMS_PASSPHRASE": "pw"}, stderr=subprocess.PIPE, text=True
        )
        assert agent.stderr is not None
        agent.stderr.readline()  # it listens
        _measure(invoke, env, 1)  # the first command through the agent
        print(_line("dmsgw invoke (agent, again)", _measure(invoke, env, rounds), floor))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print(f"(bench process: {usage.ru_maxrss / 1024:.0f} MiB; {os.cpu_count()} cores)")
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        background.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
