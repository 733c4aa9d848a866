"""dmsgw invoke / deploy / repl against an embedded devnet, with key and .cap files on disk."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dmsgw.cli import main
from dmsgw.cli.client_commands import Console, reply_json
from dmsgw.cli.logs import FOLLOW_INTERVAL_S, show_logs
from dmsgw.devnet.devnet import BackgroundDevnet, Devnet
from dmsgw.devnet_files import devnet_record as state
from dmsgw.errors import DmsgwError
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.did import DID
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext
from dmsgw.keys.ucan.store import save_context

KEY = Ed25519PrivKey(bytes(range(50, 82)))


@pytest.fixture(scope="module")
def devnet() -> Iterator[Devnet]:
    background = BackgroundDevnet(Devnet(2, seed="cli-client-tests", early_timeout=True))
    yield background.start()
    background.stop()


@pytest.fixture
def setup(devnet: Devnet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A gateway key `gw` with a context holding node0's grant; the CLI options to use it."""
    monkeypatch.setenv("DMS_PASSPHRASE", "pw")
    monkeypatch.setenv("DMSGW_TEST_SCRYPT_N", "1024")
    keys, caps = tmp_path / "key", tmp_path / "cap"
    KeyStore(keys).save("gw", marshal_private_key(KEY), "pw")
    grant = devnet.grant(DID.from_public_key(KEY.public_key()), ["/dms/node", "/public"])
    caps.mkdir()
    save_context(
        CapabilityContext(provider_from_private_key(KEY), name="gw", provide=grant), directory=caps
    )
    return ["--url", devnet.urls[0], "--key", "gw", "--key-dir", str(keys), "--cap-dir", str(caps)]


def test_invoke_prints_the_reply_as_json(
    devnet: Devnet, setup: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["invoke", "/dms/node/peers/self", *setup]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == devnet.nodes[0].node.peer_id
    other = devnet.nodes[1].node
    args = ["invoke", "/dms/node/peers/ping", "--data", f'{{"Host":"{other.peer_id}"}}', *setup]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["Error"] == ""
    assert main(["invoke", "/public/hello", "--to", other.did.uri, *setup]) == 0
    assert json.loads(capsys.readouterr().out)["DID"]["uri"] == other.did.uri


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["invoke", "/dms/node/peers/lst"], "unknown behavior '/dms/node/peers/lst'"),
        (["invoke", "/dms/node/peers/ping", "--data", "{no"], "the payload is not JSON"),
        (["invoke", "/dms/node/peers/ping", "--data", "@/nonexistent"], "cannot read the payload"),
        (["invoke", "/dms/cap/list"], "none covers /dms/cap/list"),
        (["invoke", "/public/hello", "--to", "did:key:zBAD"], "no actor handle for DID"),
        (["invoke", "/dms/node/peers/list", "--data", "{bad"], "the payload is not JSON"),
        (["invoke", "/dms/node/peers/list", "--timeout", "-5"], "seconds, got -5\n"),
        (["invoke", "/dms/node/peers/list", "--timeout", "0"], "seconds, got 0\n"),
    ],
)
def test_invoke_failures_are_one_line(
    setup: list[str], capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert main([*argv, *setup]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmsgw: error: ") and fragment in err and "Traceback" not in err


def test_a_url_that_is_not_one_is_named(
    setup: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["invoke", "/dms/node/peers/list", *setup, "--url", "notaurl"]) == 2
    assert capsys.readouterr().err == (
        "dmsgw: error: the DMS URL 'notaurl' is not a URL: expected http://host:port, e.g. "
        "http://127.0.0.1:9999\n"
    )


def test_the_client_commands_find_what_the_environment_names(
    devnet: Devnet,
    setup: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No --url, --key-dir or --cap-dir: a running `dmsgw devnet up`, $DMSGW_KEY_DIR and
    $DMSGW_CAP_DIR."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DMSGW_DMS_URL", raising=False)
    monkeypatch.setenv("DMSGW_KEY_DIR", setup[setup.index("--key-dir") + 1])
    monkeypatch.setenv("DMSGW_CAP_DIR", setup[setup.index("--cap-dir") + 1])
    state.record(devnet.seed, devnet.urls)
    assert main(["invoke", "/dms/node/peers/self", "--key", "gw"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == devnet.nodes[0].node.peer_id
    assert main(["invoke", "/dms/cap/list", "--key", "gw"]) == 2  # not granted: said at once
    assert capsys.readouterr().err.endswith(
        "hint: grant it on the devnet with `dmsgw devnet grant --seed cli-client-tests --node 0 "
        "--cap /dms/cap/list --anchor gw`\n"
    )


def test_wrong_passphrase_is_one_line(
    setup: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DMS_PASSPHRASE", "nope")
    assert main(["invoke", "/public/hello", *setup]) == 2
    assert "wrong passphrase" in capsys.readouterr().err


def test_reply_json_keeps_the_dms_keys(devnet: Devnet) -> None:
    from dmsgw.behaviors.public import HelloResponse

    text = reply_json([HelloResponse(did=devnet.nodes[0].node.did)])
    assert json.loads(text) == [{"DID": {"uri": devnet.nodes[0].node.did.uri}}]


def test_the_console_runs_top_level_await(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console({"__name__": "__console__"})
    try:
        console.push("import asyncio")
        console.push("x = await asyncio.sleep(0, result=42)")
        console.push("print(x * 2)")
        console.push("from dmsgw.errors import DmsgwError")
        console.push("raise DmsgwError('nicely put')")
    finally:
        console.close()
    out, err = capsys.readouterr()
    assert out.strip() == "84"
    assert err.strip() == "DmsgwError: nicely put"


ENSEMBLE = """\
version: V1
allocations:
  job:
    executor: docker
    type: task
    resources: {cpu: {cores: 0.1}, ram: {size: 0.1}, disk: {size: 0.1}}
    execution:
      type: docker
      image: busybox:1.36
      cmd: ["sh", "-c", "echo deployed from the cli; exit %d"]
nodes:
  n1:
    allocations: [job]
"""


@pytest.mark.parametrize(("code", "outcome"), [(0, "completed"), (3, "failed")])
def test_deploy_wait_shows_a_jobs_progress_to_its_end_and_exits_with_its_outcome(
    setup: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], code: int, outcome: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(ENSEMBLE % code)
    assert main(["deploy", str(path), "--wait", *setup]) == (0 if code == 0 else 1)
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert "deployed " in lines[0] and ": ensemble " in lines[0]
    ensemble = lines[0].rsplit(" ", 1)[-1]
    shown = [line.split("] ", 1)[1] for line in lines[1:]]
    assert shown[0] == f"{ensemble}: Preparing"
    assert any(line.startswith("n1.job: placed on node n1 (peer ") for line in shown), shown
    # a job is followed past Running, to its end: its outcome and the deployment's, in the
    # order the polls saw them (a job's network is removed before its deployment completes)
    ends = {f"{ensemble}: Completed", f"n1.job: {outcome}"}
    assert ends <= set(shown) and shown[-1] in ends, shown
    assert len(shown) == len(set(shown)), "one line per change"
    if code:
        assert err.splitlines() == [
            f"dmsgw: deployment {ensemble} failed: allocation n1.job failed "
            "(the DMS reports no exit code)",
            f"  n1.job, its last lines (`dmsgw logs {ensemble} n1.job`: all):",
            "    deployed from the cli",
        ]
    else:
        assert err == ""


def test_deploy_refuses_a_bad_file_in_one_line(
    setup: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("allocations: [1, 2\n")
    assert main(["deploy", str(path), *setup]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmsgw: error: ") and "Traceback" not in err


def test_deploy_of_an_allocation_the_devnet_cannot_run_says_why_at_once(
    setup: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    hello = Path(__file__).parent / "data" / "ensembles" / "hello.yaml"
    assert main(["deploy", str(hello), "--wait", *setup]) != 0
    err = capsys.readouterr().err
    assert "allocation alloc1" in err and "devnet limit, not a DMS rule" in err
    assert "Traceback" not in err


def test_invoke_offers_the_behaviors_of_the_dms_version(
    setup: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked, the devnet is the newest DMS: ``deployment/info`` is sent (and answered);
    told ``v0.5``, the CLI refuses what that version lacks before sending it."""
    args = ["invoke", "/dms/node/deployment/info", "--data", '{"id":"nope"}', *setup]
    assert main(args) == 2  # an error answered by the DMS
    assert "the DMS answered: failed to get deployment" in capsys.readouterr().err
    assert main([*args, "--dms-version", "v0.5"]) != 0
    err = capsys.readouterr().err
    assert "/dms/node/deployment/info is not a behavior of DMS v0.5" in err


def tasks_yaml(**scripts: str) -> str:
    """An ensemble of tasks on node n1, each running its ``sh -c`` script."""
    allocations = {
        name: {
            "executor": "docker",
            "type": "task",
            "resources": {"cpu": {"cores": 0.1}, "ram": {"size": 0.1}, "disk": {"size": 0.1}},
            "execution": {"type": "docker", "image": "busybox:1.36", "cmd": ["sh", "-c", script]},
        }
        for name, script in scripts.items()
    }
    ensemble = {"version": "V1", "allocations": allocations}
    return json.dumps({**ensemble, "nodes": {"n1": {"allocations": [*scripts]}}})  # YAML too


LOGS = tasks_yaml(job="for i in 1 2 3 4 5; do echo out $i; done; echo oops >&2", other="echo other")


@pytest.fixture
def finished(setup: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A job of two allocations that ran to its end; its ensemble ID."""
    path = tmp_path / "logs.yaml"
    path.write_text(LOGS)
    assert main(["deploy", str(path), "--wait", *setup]) == 0
    return capsys.readouterr().out.splitlines()[0].rsplit(" ", 1)[-1]


def test_logs_print_an_allocations_output_by_its_name(
    setup: list[str], finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", finished, "job", *setup]) == 0
    out, err = capsys.readouterr()
    assert out == "".join(f"out {i}\n" for i in range(1, 6)) and err == "oops\n"
    assert main(["logs", finished, "n1.job", "--tail", "2", *setup]) == 0
    assert capsys.readouterr() == ("out 4\nout 5\n", "oops\n")


def test_logs_of_a_deployment_head_each_allocation(
    setup: list[str], finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", finished, "--tail", "1", *setup]) == 0
    out, err = capsys.readouterr()
    assert out == "==> n1.job <==\nout 5\n==> n1.other <==\nother\n"
    assert err == "==> n1.job <==\noops\n"


def test_logs_follow_ends_with_the_deployment(
    setup: list[str], finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", finished, "job", "--follow", "--tail", "1", *setup]) == 0
    assert capsys.readouterr() == ("out 5\n", "oops\ndmsgw: n1.job completed\n")


def test_logs_follow_shows_what_a_running_job_writes_until_it_ends(
    setup: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started right after the deploy (without ``--wait``): it waits for the placement, shows
    the first line, then what the job writes seconds later, then its end (the job's pause
    outlasts the follow's start)."""
    path = tmp_path / "slow.yaml"
    path.write_text(tasks_yaml(job="echo first; sleep 5; echo second", other="echo other"))
    assert main(["deploy", str(path), *setup]) == 0
    ensemble = capsys.readouterr().out.splitlines()[0].rsplit(" ", 1)[-1]
    assert main(["logs", ensemble, "job", "--follow", *setup]) == 0
    out, err = capsys.readouterr()
    assert out == "first\nsecond\n" and err.endswith("dmsgw: n1.job completed\n"), (out, err)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["logs", "no-such-ensemble"], "deployment not found"),
        (["logs", "ENSEMBLE", "nosuch"], "has no allocation 'nosuch' (it has: n1.job, n1.other)"),
        (["logs", "ENSEMBLE", "--tail", "-1"], "--tail: -1 is not a number of lines"),
    ],
)
def test_logs_failures_are_one_line(
    setup: list[str],
    finished: str,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fragment: str,
) -> None:
    argv = [finished if word == "ENSEMBLE" else word for word in argv]
    assert main([*argv, *setup]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmsgw: error: ") and fragment in err and err.count("\n") == 1, err


def test_invoke_deployment_logs_takes_the_short_name_and_says_how_to_read_them(
    setup: list[str], finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.dumps({"EnsembleID": finished, "AllocationName": "job"})
    assert main(["invoke", "/dms/node/deployment/logs", "--data", data, *setup]) == 0
    out, err = capsys.readouterr()
    written = json.loads(out)["LogsWrittenTo"]
    assert (Path(written) / "stdout.log").read_text().startswith("out 1\n")
    assert err == (
        f"dmsgw: the DMS wrote stdout.log and stderr.log in {written} on its host; "
        f"`dmsgw logs {finished} n1.job` prints them\n"
    )


class _Unplaced:
    """A deployment as a DMS shows it before placement: ``statuses`` in turn, no allocations."""

    def __init__(self, *statuses: str) -> None:
        self.statuses = list(statuses)
        self.deployment = self

    def manifest(self, ensemble_id: str) -> Any:
        return SimpleNamespace(manifest=SimpleNamespace(allocations={}))

    def status(self, ensemble_id: str) -> Any:
        return SimpleNamespace(status=self.statuses.pop(0))


def test_a_follow_of_a_deployment_that_fails_before_placement_says_so() -> None:
    err, naps = io.StringIO(), []
    dms: Any = _Unplaced("Committing", "Committing", "Failed")
    with pytest.raises(DmsgwError, match="ens-1 ended Failed before any allocation was placed"):
        show_logs(dms, "ens-1", None, follow=True, err=err, sleep=naps.append)
    assert err.getvalue() == "dmsgw: ens-1 is Committing: waiting for it to be placed\n"
    assert naps == [FOLLOW_INTERVAL_S, FOLLOW_INTERVAL_S]
