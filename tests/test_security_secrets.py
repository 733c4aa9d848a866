"""Secrets stay secret: the files that hold them are private, and no passphrase, bearer token or
Kubernetes Secret data appears in the gateway's log, its ``/metrics`` or its error text.

The log is read as the operator gets it (the gateway's own handler, at DEBUG), through a whole
pod life on the embedded devnet: create with a Secret volume and a Secret env var, run, logs,
status, delete — and through requests that fail around the same secrets.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dmsgw.interlink.app import start_backend
from dmsgw.interlink.configuration.serve_config import ConfigError, load_config
from dmsgw.interlink.gateway import Gateway
from dmsgw.interlink.gateway_log import configure_logging
from dmsgw.interlink.records.pod_record import PodPolicy
from dmsgw.interlink.server import Metrics, PluginServer
from dmsgw.interlink.state.pod_store import PodStore
from dmsgw.keys.crypto import Ed25519PrivKey, marshal_private_key
from dmsgw.keys.keyfile import ScryptParams, WrongPassphraseError
from dmsgw.keys.keystore import KeyStore
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import CapabilityContext, save_context

PASSPHRASE = "pass-phrase-7Hq2-never-logged"
TOKEN = "bearer-token-Zk81-never-logged"
WRONG_TOKEN = "guessed-token-Rf55-never-echoed"
SECRET_FILE = "file-secret-Ux93-never-logged"
SECRET_ENV = "env-secret-Pw47-never-logged"
SECRETS = (PASSPHRASE, TOKEN, WRONG_TOKEN, SECRET_FILE, SECRET_ENV)
UID = "7d1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
FAST = PodPolicy(poll_min_s=0.05, poll_max_s=0.2, retry_min_s=0.05, restart_min_s=0.05)
CHEAP_SCRYPT = ScryptParams(16)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _forms(secret: str) -> set[str]:
    """How a secret could show up: as it is, and base64-encoded as Secret data travels."""
    return {secret, base64.b64encode(secret.encode()).decode()}


def assert_no_secret(text: str, where: str) -> None:
    leaked = [s for secret in SECRETS for s in _forms(secret) if s in text]
    assert not leaked, f"{where} leaks {leaked}"


# --- files ---------------------------------------------------------------------------------


async def test_key_capability_and_state_files_are_private(tmp_path: Path) -> None:
    key = Ed25519PrivKey(bytes(range(32)))
    key_file = KeyStore(tmp_path / "keys", scrypt_params=CHEAP_SCRYPT).save(
        "gw", marshal_private_key(key), PASSPHRASE
    )
    ctx = CapabilityContext(provider_from_private_key(key), name="gw")
    cap_file = save_context(ctx, directory=tmp_path / "cap")
    store = PodStore(tmp_path / "state" / "gw.sqlite3")
    await store.put(UID, {"uid": UID, "secret": SECRET_FILE})
    state_files = sorted((tmp_path / "state").iterdir())
    files = [key_file, cap_file, *state_files]
    assert {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
    dirs = [tmp_path / "keys", tmp_path / "cap", tmp_path / "state"]
    assert {p.name: _mode(p) for p in dirs} == {p.name: 0o700 for p in dirs}
    await store.close()


# --- a whole pod life on the embedded devnet ----------------------------------------------


def pod_with_secrets(uid: str = UID) -> dict[str, Any]:
    """A pod that proves it got its Secret as a file and as a variable, without printing it."""
    check = '[ -n "$PASSWORD" ] && [ "$(cat /etc/creds/password)" = "$PASSWORD" ] && echo ok'
    return {
        "metadata": {"name": f"s-{uid[:6]}", "namespace": "default", "uid": uid},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "creds", "secret": {"secretName": "db"}}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c"],
                    "args": [check],
                    "env": [
                        {
                            "name": "PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
                        },
                        {
                            "name": "API_KEY",
                            "valueFrom": {"secretKeyRef": {"name": "db", "key": "api"}},
                        },
                    ],
                    "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}],
                }
            ],
        },
    }


def create_body(spec: dict[str, Any], secret: dict[str, Any]) -> str:
    return json.dumps({"pod": spec, "container": [{"name": "main", "secrets": [secret]}]})


DB_SECRET = {
    "metadata": {"name": "db", "namespace": "default"},
    "data": {"password": base64.b64encode(SECRET_FILE.encode()).decode()},
    "stringData": {"api": SECRET_ENV},
}


@pytest.fixture
def operator_log() -> Iterator[io.StringIO]:
    """The gateway's own log handler at DEBUG, as ``dmsgw serve`` installs it."""
    root = logging.getLogger()
    level = root.level
    stream = io.StringIO()
    handler = configure_logging("DEBUG", "json", secrets=[PASSPHRASE, TOKEN], stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
async def served(
    tmp_path: Path, operator_log: io.StringIO
) -> AsyncIterator[tuple[TestClient[Any, Any], Gateway, Metrics]]:
    key_dir = tmp_path / "keys"
    key = Ed25519PrivKey(bytes(range(1, 33)))
    KeyStore(key_dir, scrypt_params=CHEAP_SCRYPT).save(
        "dmsgw", marshal_private_key(key), PASSPHRASE
    )
    config = load_config(
        env={
            "DMSGW_DEVNET": "1",
            "DMSGW_STATE_PATH": str(tmp_path / "state" / "gw.sqlite3"),
            "DMSGW_KEY_DIR": str(key_dir),
            "DMS_PASSPHRASE": PASSPHRASE,
            "DMSGW_TOKEN": TOKEN,
            "DMSGW_LISTEN": "127.0.0.1:0",  # on TCP, where the plugin API asks for the token
        }
    )
    metrics = Metrics()
    backend = await start_backend(config, metrics=metrics, policy=FAST)
    server = PluginServer(backend, config.server_options(), metrics)
    client = TestClient(
        TestServer(server.app(), host="127.0.0.1"),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    await client.start_server()
    try:
        yield client, backend, metrics
    finally:
        await client.close()
        await backend.close()


async def _terminated(client: TestClient[Any, Any], spec: dict[str, Any]) -> list[str]:
    """Poll /status until the container ends; every answer's text, for the leak check."""
    answers = []
    for _ in range(400):
        resp = await client.get("/status", data=json.dumps([spec]))
        answers.append(await resp.text())
        assert resp.status == 200, answers[-1]
        (status,) = await resp.json()
        if "terminated" in status["containers"][0]["state"]:
            return answers
        await asyncio.sleep(0.05)  # interLink's poll interval, shortened
    raise AssertionError(f"the pod never ended: {answers[-1]}")


async def test_no_secret_in_the_log_metrics_or_answers_through_a_pod_life(
    served: tuple[TestClient[Any, Any], Gateway, Metrics], operator_log: io.StringIO
) -> None:
    client, _, metrics = served
    spec = pod_with_secrets()
    created = await client.post("/create", data=create_body(spec, DB_SECRET))
    answers = [await created.text()]
    assert created.status == 200, answers[0]
    answers += await _terminated(client, spec)
    assert json.loads(answers[-1])[0]["containers"][0]["state"]["terminated"]["exitCode"] == 0
    logs = await client.get(
        "/getLogs",
        data=json.dumps(
            {
                "Namespace": "default",
                "PodUID": UID,
                "PodName": spec["metadata"]["name"],
                "ContainerName": "main",
                "Opts": {},
            }
        ),
    )
    answers.append(await logs.text())
    assert "ok\n" in answers[-1]  # the pod had its secret, as a file and as a variable
    deleted = await client.post("/delete", data=json.dumps(spec))
    answers.append(await deleted.text())
    page = metrics.render().decode()
    (grant_line,) = [
        line for line in page.splitlines() if line.startswith("dmsgw_grant_expiry_seconds ")
    ]
    assert 364 * 86400 < float(grant_line.split()[1]) <= 365 * 86400  # the devnet's year
    assert_no_secret("\n".join(answers), "a plugin API answer")
    assert_no_secret(page, "/metrics")
    log_text = operator_log.getvalue()
    assert '"level": "DEBUG"' in log_text  # the log was read at its most talkative
    assert_no_secret(log_text, "the log")


async def test_no_secret_in_the_text_of_refused_or_failed_requests(
    served: tuple[TestClient[Any, Any], Gateway, Metrics], operator_log: io.StringIO
) -> None:
    client, _, _ = served
    answers = []
    wrong = await client.post(
        "/create", data="{}", headers={"Authorization": f"Bearer {WRONG_TOKEN}"}
    )
    assert wrong.status == 401
    answers.append(await wrong.text())
    malformed: list[dict[str, Any]] = [
        {**DB_SECRET, "data": {"password": SECRET_FILE}},  # not base64
        {**DB_SECRET, "stringData": {"api": [SECRET_ENV]}},  # not a string
        {**DB_SECRET, "type": {"of": SECRET_ENV}},
    ]
    for secret in malformed:
        resp = await client.post("/create", data=create_body(pod_with_secrets(), secret))
        assert resp.status == 400
        answers.append(await resp.text())
    untranslatable = pod_with_secrets("8e2f3a4b-5c6d-4e7f-9a0b-1c2d3e4f5a6b")
    untranslatable["spec"]["volumes"].append({"name": "nfs", "nfs": {"server": "x", "path": "/"}})
    created = await client.post("/create", data=create_body(untranslatable, DB_SECRET))
    assert created.status == 200
    answers += await _terminated(client, untranslatable)
    assert "nfs" in answers[-1]  # it failed, saying why
    assert_no_secret("\n".join(answers), "an error answer")
    assert_no_secret(operator_log.getvalue(), "the log")


def test_no_secret_in_the_errors_of_configuration_and_unlocking(tmp_path: Path) -> None:
    """A refused token, secrets in the config file, a wrong passphrase: said, never echoed."""
    errors = []
    config_file = tmp_path / "gw.yaml"
    config_file.write_text(f'token: "{TOKEN}"\npassphrase: "{PASSPHRASE}"\n')
    for env in (
        {"DMSGW_DEVNET": "1", "DMSGW_TOKEN": f"{TOKEN} with spaces"},
        {"DMSGW_DEVNET": "1", "DMSGW_CONFIG": str(config_file)},
    ):
        with pytest.raises(ConfigError) as config_error:
            load_config(env=env)
        errors.append(str(config_error.value))
    store = KeyStore(tmp_path / "keys", scrypt_params=CHEAP_SCRYPT)
    store.save("gw", marshal_private_key(Ed25519PrivKey(bytes(32))), "the right one")
    with pytest.raises(WrongPassphraseError) as unlock_error:
        store.priv_key("gw", PASSPHRASE)
    errors.append(str(unlock_error.value))
    assert "bearer token is printable ASCII" in errors[0] and "wrong passphrase" in errors[2]
    assert_no_secret("\n".join(errors), "an error")
