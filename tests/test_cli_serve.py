"""``dmsgw serve`` as an operator runs it: a real process, stopped by a signal.

The gateway is replaced by a fake ``dmsgw.interlink.app`` module put in ``sys.modules``
before ``dmsgw.cli.main`` runs, so that the command's configuration, its output and its
shutdown are the real ones. The tests wait for the printed lines, never for a fixed time.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmsgw import cli

FAKE_GATEWAY = """
import os, sys, types
from dmsgw import cli
from dmsgw.errors import DmsgwError
from dmsgw.interlink.wire.bodies import PingResponse

class Backend:
    async def create(self, pods):
        return []
    async def delete(self, pod):
        pass
    async def status(self, pods):
        return []
    def statuses_at_once(self, uids):
        return None
    async def ping(self):
        return PingResponse(status="ok")
    def logs(self, request):
        raise DmsgwError("no logs here")
    async def close(self):
        print("fake backend closed", flush=True)

async def start_backend(config, *, metrics):
    if os.environ.get("FAKE_BACKEND") == "fail":
        raise DmsgwError("key dmsgw: wrong passphrase")
    metrics.gauge("fake_capacity", "Pods the fake offers.").set(config.pods_capacity)
    return Backend()

module = types.ModuleType("dmsgw.interlink.app")
module.start_backend = start_backend
sys.modules["dmsgw.interlink.app"] = module
sys.exit(cli.main(sys.argv[1:]))
"""

STARTUP_S = 60.0


class Gateway:
    """A ``dmsgw serve`` process and what it printed so far."""

    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        script = tmp_path / "fake_gateway.py"
        script.write_text(FAKE_GATEWAY)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DMSGW_", "DMS_"))}
        clean.update(env, XDG_STATE_HOME=str(tmp_path / "state"))
        argv = [sys.executable, str(script), "serve", "--devnet", "--listen", "127.0.0.1:0"]
        argv += ["--operator-listen", "127.0.0.1:0", "--log-format", "text", *args]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean, cwd=tmp_path
        )
        self.lines: list[str] = []
        self._partial = b""

    def wait_for(self, prefix: str) -> str:
        """The first stdout line starting with ``prefix``, reading as lines arrive."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + STARTUP_S
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                found = [line for line in self.lines if line.startswith(prefix)]
                if found:
                    return found[0]
                if not selector.select(deadline - time.monotonic()):
                    break
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                *complete, self._partial = (self._partial + chunk).split(b"\n")
                self.lines += [line.decode() for line in complete]
        self.process.kill()
        _, err = self.process.communicate()
        pytest.fail(f"no {prefix!r} line; stdout {self.lines}, stderr {err.decode()[-2000:]}")

    def url(self, prefix: str) -> str:
        return self.wait_for(prefix).split()[-1]

    def stop(self, sig: signal.Signals) -> tuple[int, str, str]:
        self.process.send_signal(sig)
        out, err = self.process.communicate(timeout=STARTUP_S)
        rest = (self._partial + out).decode()
        return self.process.returncode, "\n".join([*self.lines, rest]), err.decode()


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gateway in started:
        if gateway.process.poll() is None:
            gateway.process.kill()
            gateway.process.communicate()


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=STARTUP_S) as response:
        return response.status, response.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_starts_answers_and_stops_cleanly(
    tmp_path: Path, gateways: list[Gateway], sig: signal.Signals
) -> None:
    gateway = Gateway(tmp_path, "--pods-capacity", "7")
    gateways.append(gateway)
    listening = gateway.wait_for("dmsgw serve: listening on http://127.0.0.1:")
    port = listening.split("http://127.0.0.1:")[1].split()[0]
    assert f'SidecarURL "http://127.0.0.1", SidecarPort "{port}"' in listening
    assert gateway.wait_for("dmsgw serve: DMS ") == "dmsgw serve: DMS embedded devnet"

    status, body = get(gateway.url("dmsgw serve: health "))
    assert status == 200
    report = json.loads(body)
    assert (report["status"], report["live"], report["ready"]) == ("serving", True, True)
    _, metrics = get(gateway.url("dmsgw serve: metrics "))
    assert b"\ndmsgw_fake_capacity 7.0\n" in metrics

    ping = urllib.request.Request(
        f"http://127.0.0.1:{port}/status",
        data=b"[]",
        method="GET",
        headers={"Content-Type": "application/json"},  # as interLink sends it
    )
    with urllib.request.urlopen(ping, timeout=STARTUP_S) as response:
        assert json.loads(response.read()) == {"status": "ok"}

    code, out, err = gateway.stop(sig)
    assert code == 0, err
    assert out.splitlines()[-2:] == ["fake backend closed", "dmsgw serve: stopped"]
    assert f"{sig.name} received: stopping" in err
    assert "Traceback" not in err


def test_serve_logs_json_lines_without_secrets(tmp_path: Path, gateways: list[Gateway]) -> None:
    token = "tok-1234567890abcdef"
    gateway = Gateway(tmp_path, "--log-format", "json", DMSGW_TOKEN=token, DMS_PASSPHRASE="pw-9876")
    gateways.append(gateway)
    gateway.wait_for("dmsgw serve: listening on")
    _, _, err = gateway.stop(signal.SIGTERM)
    entries = [json.loads(line) for line in err.splitlines()]
    config = next(e for e in entries if e["message"] == "configuration")["config"]
    assert (config["token"], config["passphrase"]) == ("set", "set")
    assert config["pods_capacity"] == "1000 (default)"
    assert token not in err and "pw-9876" not in err


def test_a_failing_backend_is_one_line(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path, FAKE_BACKEND="fail")
    out, err = gateway.process.communicate(timeout=STARTUP_S)
    assert gateway.process.returncode == 2
    assert err.decode().splitlines()[-1] == "dmsgw: error: key dmsgw: wrong passphrase"
    assert b"Traceback" not in err and b"listening" not in out


# --- in-process: failures before anything starts ---------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("DMSGW_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))


@pytest.mark.usefixtures("clean_env")
def test_bad_configuration_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--listen", "0.0.0.0:4000", "--pods-capacity", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "dmsgw: error: pods_capacity (flag --pods-capacity): input should be greater than or "
        "equal to 1 (got '-1')"
    )
    assert err.count("\n") == 1
