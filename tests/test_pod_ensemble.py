"""``dmsgw.interlink.translate``: a pod, as interLink sends it, translated into an ensemble.

Fixtures come from ``tests/data/interlink`` (the seed's quickstart pod and GPU pod, the spec's
``/create`` example, the every-field pod). The shell the translation generates (provision
scripts, the wrapper of init containers and hooks) is run with ``/bin/sh`` where it matters,
with the absolute paths of the pod pointed into a temporary directory.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmsgw.behaviors.ensemble import (
    STOP_TIMEOUT_PARAM,
    AllocationConfig,
    EnsembleConfig,
    HealthCheckManifest,
)
from dmsgw.behaviors.ensemble_validation import validate_ensemble
from dmsgw.behaviors.resources import GPU
from dmsgw.interlink.translate import (
    CONTROL_MOUNT,
    EXCLUDE_PEERS_ANNOTATION,
    METADATA_ACTIVE_DEADLINE,
    METADATA_GENERATION,
    METADATA_GRACE_PERIOD,
    METADATA_POD_NAME,
    METADATA_POD_NAMESPACE,
    METADATA_POD_UID,
    METADATA_PROBES_PREFIX,
    METADATA_RESTART_POLICY,
    PEER_ANNOTATION,
    POD_NODE,
    UNWRAPPED_ANNOTATION,
    PodTranslationError,
    TranslationOptions,
    is_wrapped,
    pod_to_ensemble,
)
from dmsgw.interlink.translate.pod_ensemble import DMS_PORT_RANGE
from dmsgw.interlink.translate.run_markers import Marker, markers
from dmsgw.interlink.wire import k8s
from dmsgw.interlink.wire.bodies import RetrievedPodData
from dmsgw.interlink.wire.parsing import parse_create_body
from tests.support.pod_bodies import DATA, SH, UID, cm, container, data, make_pod, needs_sh

PEER = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"
OTHER_PEER = "12D3KooWJMtMN1mTNRfgMqUygT7eSXamVzc9ihpSjeairm9PebmB"
MIB = 1 << 20
GIB = 1 << 30
V100 = GPU(vendor="NVIDIA", model="Tesla V100-SXM2-40GB", vram=40 * GIB)
RTX3080 = GPU(vendor="NVIDIA", model="NVIDIA GeForce RTX 3080", vram=10 * GIB)
CATALOG = {"nvidia.v100.40gb": V100, "nvidia.rtx.3080.10gb": RTX3080}


def load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def translate(pod: dict[str, Any], **kwargs: Any) -> EnsembleConfig:
    options = kwargs.pop("options", None)
    config = pod_to_ensemble(data(pod, **kwargs), options=options)
    assert validate_ensemble(config) == ()
    return config


def refusal(pod: dict[str, Any], **kwargs: Any) -> str:
    options = kwargs.pop("options", None)
    with pytest.raises(PodTranslationError) as info:
        pod_to_ensemble(data(pod, **kwargs), options=options)
    return str(info.value)


def allocation(config: EnsembleConfig, name: str = "main") -> AllocationConfig:
    assert config.v1 is not None and config.v1.allocations is not None
    return config.v1.allocations[name]


def params(config: EnsembleConfig, name: str = "main") -> dict[str, Any]:
    return dict(allocation(config, name).execution.params or {})


def unwrapped(p: dict[str, Any]) -> dict[str, Any]:
    """An allocation's execution params with the pod wrapper taken off: the command it runs
    as ``entrypoint`` (the wrapper passes the container's command and args as its own), and
    without the grace period every container has (its own test below)."""
    assert isinstance(p.pop(STOP_TIMEOUT_PARAM), int)
    entrypoint = p.pop("entrypoint", [])
    if entrypoint:
        assert entrypoint[:2] == ["/bin/sh", "-c"] and entrypoint[3:] == ["dmsgw-pod"]
        p["entrypoint"] = p.pop("cmd")
    return p


def script(config: EnsembleConfig, name: str = "main") -> str:
    assert config.v1 is not None
    names = allocation(config, name).provision or ()
    assert len(names) == 1
    return (config.v1.scripts or {})[names[0]].decode()


def metadata(config: EnsembleConfig) -> dict[str, str]:
    assert config.v1 is not None
    return dict(config.v1.metadata or {})


def secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    return {"metadata": {"name": name, "namespace": "default"}, "data": encoded}


# --- the seed's and the spec's pods ----------------------------------------------------------


def test_the_seed_quickstart_pod() -> None:
    """The ``interlink-quickstart`` pod of the seed, as interLink <= 0.4 sent it (a list)."""
    [body] = parse_create_body((DATA / "create_v04_quickstart.json").read_bytes())
    config = pod_to_ensemble(body)
    assert validate_ensemble(config) == ()
    assert config.v1 is not None
    assert config.v1.nodes == {
        POD_NODE: config.v1.nodes[POD_NODE] if config.v1.nodes else None,
    }
    node = (config.v1.nodes or {})[POD_NODE]
    assert node.allocations == ("my-container",)
    assert (node.peer, node.ports) == ("", None)
    main = allocation(config, "my-container")
    assert (main.executor, main.type, main.failure_recovery) == ("docker", "service", "one_for_one")
    assert unwrapped(dict(main.execution.params or {})) == {
        "image": "busybox",
        "entrypoint": ["/bin/sh", "-c", "sleep 600 && echo 'FINISHED!'"],
    }
    assert main.resources.cpu.cores == 1
    assert (main.resources.ram.size, main.resources.disk.size) == (GIB, GIB)
    assert main.provision is None and main.volume is None and main.depends_on is None
    assert main.healthcheck.is_empty()
    assert config.v1.scripts is None
    assert metadata(config) == {
        METADATA_POD_UID: "1df0a37e-a29b-426b-9b14-43f95dfc5a2f",
        METADATA_POD_NAMESPACE: "default",
        METADATA_POD_NAME: "interlink-quickstart",
        METADATA_RESTART_POLICY: "Always",
        METADATA_GENERATION: "0",
        METADATA_GRACE_PERIOD: "30",
    }


def test_the_seed_gpu_pod_asks_for_the_gpu_class_peers_report() -> None:
    """The seed's ``tensorflow-gpu-job``: ``nunet.gpu.nvidia.v100.40gb: 1`` and a matching
    required node affinity on ``gpu-type``."""
    pod = load("pod_seed_tensorflow.json")
    pod["metadata"]["uid"] = UID
    config = translate(pod, options=TranslationOptions(gpu_models=CATALOG))
    main = allocation(config, "tensorflow-container")
    assert main.type == "task" and main.failure_recovery == "stay_down"  # restartPolicy Never
    assert main.resources.cpu.cores == 8
    assert main.resources.ram.size == 128 * GIB
    assert main.resources.gpus == (V100,)
    assert unwrapped(dict(main.execution.params or {})) == {
        "image": "tensorflow/tensorflow:latest-gpu",
        "entrypoint": ["python", "-u", "path/to/your/tensorflow/script.py"],
    }


def test_a_gpu_class_no_peer_reports_is_refused() -> None:
    pod = load("pod_seed_tensorflow.json")
    pod["metadata"]["uid"] = UID
    assert refusal(
        pod, options=TranslationOptions(gpu_models={"nvidia.rtx.3080.10gb": RTX3080})
    ) == (
        'spec.containers[0].resources.limits["nunet.gpu.nvidia.v100.40gb"]: no reachable DMS '
        "peer reports a GPU of type nvidia.v100.40gb (known: nvidia.rtx.3080.10gb)"
    )


def test_the_spec_create_example_with_init_container_and_volumes() -> None:
    """interLink >= 0.5's body: an init container filling an emptyDir, a ConfigMap volume and
    the service-account projected volume, whose files interLink resolved."""
    [body] = parse_create_body((DATA / "create_v05_example.json").read_bytes())
    config = pod_to_ensemble(body)
    assert validate_ensemble(config) == ()
    init, main = allocation(config, "init"), allocation(config, "main")
    assert (init.type, main.type) == ("task", "task")
    assert (init.depends_on, main.depends_on) == (None, ("init",))
    control = f"dmsgw.{UID}.ctl.0"
    work = f"dmsgw.{UID}.empty.work"
    assert [(v.src, v.mount_destination, v.read_only) for v in init.volume or ()] == [
        (control, CONTROL_MOUNT, False),
        (work, "/data", False),
    ]
    assert [(v.src, v.mount_destination, v.read_only) for v in main.volume or ()] == [
        (control, CONTROL_MOUNT, False),
        (work, "/data", False),
        (f"dmsgw.{UID}.files.main.cfg", "/etc/cfg", True),
        (
            f"dmsgw.{UID}.files.main.kube-api-access-abcde",
            "/var/run/secrets/kubernetes.io/serviceaccount",
            True,
        ),
    ]
    assert all(v.type == "local" for v in (*(init.volume or ()), *(main.volume or ())))
    text = script(config)
    assert "printf 'x=1\\012' > /etc/cfg/app.conf\nchmod 644 /etc/cfg/app.conf" in text
    assert "/var/run/secrets/kubernetes.io/serviceaccount/namespace" in text
    assert "while [ ! -e /.dmsgw/init.done ]; do\n" in text and text.endswith("done\n")
    assert init.provision is None  # the first init container has nothing to wait for


def test_the_every_field_pod_is_refused_field_by_field() -> None:
    """``pod_full.json`` uses every feature the models type: each thing the DMS cannot honour
    is refused by name, and once those are gone the pod translates."""
    pod = load("pod_full.json")
    sent = {
        "config_maps": [
            cm("train-config", {"train.yaml": "epochs: 3\n", "lr": "0.01"}),
            cm("kube-root-ca.crt", {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}),
        ],
        "secrets": [secret("train-secrets", {"token": b"s3cr3t"})],
        "projected": [{"metadata": {"name": "kube-api-access-x7k2p"}, "data": {"token": "eyJ"}}],
        "options": TranslationOptions(gpu_models=CATALOG),
    }
    main = pod["spec"]["containers"][0]
    steps: list[tuple[str, Callable[[], object]]] = [
        (
            "spec.imagePullSecrets: not supported: registry credentials cannot reach the DMS",
            lambda: pod["spec"].pop("imagePullSecrets"),
        ),
        (
            "spec.volumes[1].emptyDir.medium: Memory (tmpfs) is not supported by DMS volumes",
            lambda: _drop_volume(pod, "dev-shm"),
        ),
        (
            "spec.volumes[5] (hostPath): volume kind not supported",
            lambda: _drop_volume(pod, "models"),
        ),
        (
            "spec.volumes[5] (persistentVolumeClaim): volume kind not supported",
            lambda: _drop_volume(pod, "datasets"),
        ),
        (
            "spec.volumes[5] (nfs): volume kind not supported",
            lambda: _drop_volume(pod, "archive"),
        ),
        (
            "spec.containers[0].securityContext.runAsUser: not supported: the DMS runs "
            "containers with its own user and privileges",
            lambda: main.pop("securityContext"),
        ),
        (
            "spec.containers[0].volumeMounts[1].subPath: not supported: mount the whole volume",
            lambda: main["volumeMounts"][1].update(subPath="", mountPath="/etc/train"),
        ),
        (
            # the optional Secret projection brings its key "token" beside the account's token
            "spec.volumes[3]: two files at the same path 'token'",
            lambda: pod["spec"]["volumes"][3]["projected"]["sources"][3]["secret"].update(
                items=[{"key": "token", "path": "train-token"}]
            ),
        ),
        (
            "spec.containers[0].readinessProbe.httpGet.httpHeaders: not supported",
            lambda: main["readinessProbe"]["httpGet"].pop("httpHeaders"),
        ),
    ]
    for expected, fix in steps:
        assert refusal(pod, **copy.deepcopy(sent)) == expected
        fix()
    config = translate(pod, **sent)
    trainer = allocation(config, "trainer")
    assert trainer.resources.cpu.cores == 8
    assert trainer.resources.ram.size == 128 * GIB
    assert trainer.resources.disk.size == 50 * 10**9
    assert trainer.resources.gpus == (V100,)
    env = params(config, "trainer")["environment"]
    assert env == [
        "MODE=train",
        "EMPTY=",
        "API_TOKEN=s3cr3t",
        "LEARNING_RATE=0.01",
        "POD_NAME=train-gpu-5d9x",
        f"MEM_LIMIT_MI={128 * 1024}",
    ]
    text = script(config, "trainer")
    assert """printf 'app="train"\\012job-name="train-gpu"' > /etc/podinfo/labels""" in text
    assert "printf '8000' > /etc/podinfo/cpu_limit" in text
    assert "chmod 400 /etc/creds/token" in text  # the secret's defaultMode 256
    assert metadata(config)[METADATA_ACTIVE_DEADLINE] == "7200"
    assert metadata(config)[METADATA_GRACE_PERIOD] == "45"
    assert metadata(config)[METADATA_RESTART_POLICY] == "OnFailure"
    assert trainer.failure_recovery == "one_for_one"
    assert allocation(config, "fetch-data").failure_recovery == "one_for_one"


def _drop_volume(pod: dict[str, Any], name: str) -> None:
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != name]
    for c in pod["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] != name]


# --- commands and environment ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"command": ["run"], "args": ["a", "b"]}, {"entrypoint": ["run", "a", "b"]}),
        ({"command": ["run"]}, {"entrypoint": ["run"]}),  # the image's CMD is dropped, as in k8s
        ({"command": [], "args": ["x"]}, {"cmd": ["x"]}),  # the image's ENTRYPOINT gets args
        ({"command": []}, {}),
    ],
)
def test_command_and_args_run_under_the_wrapper_args_alone_after_the_image_entrypoint(
    fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    config = translate(make_pod(container(**fields)))
    assert unwrapped(params(config)) == {"image": "busybox", **expected}


@pytest.mark.parametrize(("grace", "expected"), [(None, 30), (0, 0), (60, 60)])
def test_every_container_carries_the_pods_grace_period_as_its_stop_timeout(
    grace: int | None, expected: int
) -> None:
    """Docker's ``StopTimeout`` for the executor (decision 071), wrapped or not."""
    pod = make_pod(container(command=["run"]), container(name="plain", command=[]))
    if grace is not None:
        pod["spec"]["terminationGracePeriodSeconds"] = grace
    config = translate(pod)
    assert params(config)[STOP_TIMEOUT_PARAM] == expected
    assert params(config, "plain")[STOP_TIMEOUT_PARAM] == expected


def test_command_and_args_expand_variables_as_the_kubelet_does() -> None:
    main = container(
        command=["echo", "$(GREETING)", "$$(GREETING)", "$(MISSING)", "$(UNCLOSED", "$", "a$b"],
        args=["$(NAME)-$(GREETING)"],
        env=[{"name": "GREETING", "value": "hi"}, {"name": "NAME", "value": "x"}],
    )
    p = unwrapped(params(translate(make_pod(main))))
    assert p["entrypoint"] == [
        *["echo", "hi", "$(GREETING)", "$(MISSING)", "$(UNCLOSED", "$", "a$b"],
        "x-hi",
    ]


def test_environment_resolves_leftover_references() -> None:
    main = container(
        env=[
            {"name": "LITERAL", "value": "v"},
            {"name": "EMPTY"},
            {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
            {
                "name": "OPTIONAL",
                "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}},
            },
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {
                "name": "CPU_MILLI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
            },
            {
                "name": "MEM_REQ",
                "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}},
            },
            {"name": "LITERAL", "value": "last wins"},
        ],
        resources={"requests": {"memory": "64Mi", "cpu": "250m"}},
    )
    pod = make_pod(main)
    pod["metadata"]["labels"] = {"app": "web"}
    config = translate(
        pod,
        config_maps=[cm("cfg", {"k": "from-cm"})],
        secrets=[secret("s", {"pw": b"hunter2"})],
        options=TranslationOptions(pod_ip="10.1.0.2"),
    )
    assert params(config)["environment"] == [
        "LITERAL=last wins",
        "EMPTY=",
        "FROM_CM=from-cm",
        "FROM_SECRET=hunter2",
        "NS=default",
        f"UID={UID}",
        "APP=web",
        "IP=10.1.0.2",
        "CPU_MILLI=250",
        f"MEM_REQ={64 * MIB}",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}},
            "spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap 'absent' was not "
            "sent by interLink",
        ),
        (
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nokey"}}},
            "spec.containers[0].env[0].valueFrom.configMapKeyRef: ConfigMap 'cfg' has no key "
            "'nokey'",
        ),
        (
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "bin", "key": "raw"}}},
            "spec.containers[0].env[0].valueFrom.secretKeyRef: Secret 'bin' key 'raw' is not "
            "UTF-8 text",
        ),
        (
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            "spec.containers[0].env[0].valueFrom.fieldRef: field 'status.hostIP' is not supported",
        ),
        (
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            "spec.containers[0].env[0].valueFrom.fieldRef: status.podIP is not known before the "
            "pod is deployed",
        ),
        (
            {"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}},
            "spec.containers[0].env[0].valueFrom.resourceFieldRef: resource "
            "'limits.nvidia.com/gpu' is not supported",
        ),
        (
            {"name": "X", "valueFrom": {}},
            "spec.containers[0].env[0].valueFrom: exactly one source must be given",
        ),
        (
            {"name": "my.var", "value": "1"},
            "spec.containers[0].env[0] (my.var): the DMS accepts only letters, digits and _ in "
            "variable names",
        ),
    ],
)
def test_unresolvable_environment_is_refused(env: dict[str, Any], expected: str) -> None:
    sent = {"config_maps": [cm("cfg", {"k": "v"})], "secrets": [secret("bin", {"raw": b"\xff"})]}
    assert refusal(make_pod(container(env=[env])), **sent) == expected


# --- resources -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "cores", "ram", "disk"),
    [
        ({}, 0.5, 512 * MIB, GIB),  # the defaults
        ({"requests": {"cpu": "2", "memory": "1Gi"}}, 2, GIB, GIB),
        (
            {"limits": {"cpu": "1500m", "memory": "3G"}, "requests": {"cpu": "1"}},
            1.5,
            3 * 10**9,
            GIB,
        ),
        ({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}, 2, 512 * MIB, GIB),  # request floor
        ({"limits": {"cpu": "1m"}}, 0.01, 512 * MIB, GIB),  # the DMS counts 1/100 cores
        ({"limits": {"cpu": "0"}}, 0.5, 512 * MIB, GIB),  # zero is unset
        ({"limits": {"ephemeral-storage": "20Gi"}}, 0.5, 512 * MIB, 20 * GIB),
    ],
)
def test_requests_and_limits_become_dms_resources(
    resources: dict[str, Any], cores: float, ram: int, disk: int
) -> None:
    main = allocation(translate(make_pod(container(resources=resources))))
    assert main.resources.cpu.cores == pytest.approx(cores)
    assert (main.resources.ram.size, main.resources.disk.size) == (ram, disk)


def test_defaults_are_options() -> None:
    options = TranslationOptions(
        default_cpu_cores=2, default_memory_bytes=GIB, default_disk_bytes=10 * GIB
    )
    main = allocation(translate(make_pod(container()), options=options))
    assert (main.resources.cpu.cores, main.resources.ram.size, main.resources.disk.size) == (
        2,
        GIB,
        10 * GIB,
    )


def test_gpus_from_nvidia_and_nunet_resources() -> None:
    main = container(
        resources={
            "limits": {"nvidia.com/gpu": "2", "nunet.io/gpu.nvidia.rtx.3080.10gb": "1"},
        }
    )
    gpus = allocation(translate(make_pod(main), options=TranslationOptions(gpu_models=CATALOG)))
    assert gpus.resources.gpus == (
        GPU(index=0, vendor="NVIDIA"),
        GPU(index=1, vendor="NVIDIA"),
        GPU(index=2, vendor="NVIDIA", model="NVIDIA GeForce RTX 3080", vram=10 * GIB),
    )


def test_a_required_gpu_type_fixes_the_model_of_nvidia_gpus() -> None:
    main = container(resources={"limits": {"nvidia.com/gpu": "1"}})
    pod = make_pod(main, nodeSelector={"nunet.io/gpu-type": "nvidia.rtx.3080.10gb"})
    config = translate(pod, options=TranslationOptions(gpu_models=CATALOG))
    assert allocation(config).resources.gpus == (RTX3080,)


@pytest.mark.parametrize(
    ("spec", "limits", "expected"),
    [
        (
            {"nodeSelector": {"gpu-type": "nunet.gpu.nvidia.rtx.3080.10gb"}},
            {"nunet.gpu.nvidia.v100.40gb": "1"},
            'spec.containers[0].resources.limits["nunet.gpu.nvidia.v100.40gb"]: conflicts with '
            'the GPU type of spec.nodeSelector["gpu-type"]',
        ),
        (
            {"nodeSelector": {"gpu-type": "nunet.gpu.nvidia.rtx.3080.10gb"}},
            {},
            'spec.nodeSelector["gpu-type"]: the pod requests no GPU of this type',
        ),
        (
            {"nodeSelector": {"gpu-type": "a100"}},
            {"nvidia.com/gpu": "1"},
            "spec.nodeSelector[\"gpu-type\"]: 'a100' is not a GPU type such as "
            "nunet.gpu.nvidia.rtx.3080.10gb",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "gpu-type",
                                            "operator": "In",
                                            "values": [
                                                "nunet.gpu.nvidia.v100.40gb",
                                                "nunet.gpu.nvidia.rtx.3080.10gb",
                                            ],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            {"nvidia.com/gpu": "1"},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
            "nodeSelectorTerms[0].matchExpressions[0]: a GPU type must be required as `In` with "
            "exactly one value",
        ),
        (
            {"nodeSelector": {"gpu-type": "nunet.gpu.amd.mi100.32gb"}},
            {"nvidia.com/gpu": "1"},
            "spec.containers[0].resources: nvidia.com/gpu conflicts with the GPU type of "
            'spec.nodeSelector["gpu-type"]',
        ),
        (
            {},
            {"nvidia.com/gpu": "500m"},
            "spec.containers[0].resources: nvidia.com/gpu must be a whole number",
        ),
    ],
)
def test_gpu_requirements_that_cannot_be_honoured(
    spec: dict[str, Any], limits: dict[str, str], expected: str
) -> None:
    catalog = {**CATALOG, "amd.mi100.32gb": GPU(vendor="AMD/ATI", model="MI100", vram=32 * GIB)}
    pod = make_pod(container(resources={"limits": limits}), **spec)
    assert refusal(pod, options=TranslationOptions(gpu_models=catalog)) == expected


def test_emptydir_size_limit_is_reserved_by_the_first_container_mounting_it() -> None:
    mount = {"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
    pod = make_pod(
        container("a", **mount),
        container("b", **mount),
        volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "5Gi"}}],
    )
    config = translate(pod)
    assert allocation(config, "a").resources.disk.size == 6 * GIB
    assert allocation(config, "b").resources.disk.size == GIB


# --- volumes and files -----------------------------------------------------------------------


def test_containers_share_an_emptydir_and_get_their_own_copies_of_files() -> None:
    pod = make_pod(
        container(
            "writer",
            volumeMounts=[
                {"name": "shared", "mountPath": "/shared"},
                {"name": "cfg", "mountPath": "/etc/app"},
            ],
        ),
        container(
            "reader",
            volumeMounts=[
                {"name": "shared", "mountPath": "/in", "readOnly": True},
                {"name": "cfg", "mountPath": "/cfg"},
            ],
        ),
        volumes=[{"name": "shared", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
    )
    config = translate(pod, config_maps=[cm("c", {"a.conf": "a=1\n"})])
    writer, reader = allocation(config, "writer"), allocation(config, "reader")
    assert [(v.src, v.mount_destination, v.read_only) for v in writer.volume or ()] == [
        (f"dmsgw.{UID}.empty.shared", "/shared", False),
        (f"dmsgw.{UID}.files.writer.cfg", "/etc/app", True),
    ]
    assert [(v.src, v.mount_destination, v.read_only) for v in reader.volume or ()] == [
        (f"dmsgw.{UID}.empty.shared", "/in", True),
        (f"dmsgw.{UID}.files.reader.cfg", "/cfg", True),
    ]
    assert "> /etc/app/a.conf" in script(config, "writer")
    assert "> /cfg/a.conf" in script(config, "reader")
    assert (writer.depends_on, reader.depends_on) == (None, None)


def _run_script(text: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SH or "sh", "-c", text], capture_output=True, text=True, cwd=root)


@needs_sh
def test_provision_script_writes_files_with_their_paths_and_modes(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 9  # binary, several printf chunks
    pod = make_pod(
        container(
            volumeMounts=[
                {"name": "cfg", "mountPath": f"{tmp_path}/cfg"},
                {"name": "sec", "mountPath": f"{tmp_path}/sec"},
                {"name": "all", "mountPath": f"{tmp_path}/all"},
            ]
        ),
        volumes=[
            {
                "name": "cfg",
                "configMap": {
                    "name": "c",
                    "items": [
                        {"key": "app.conf", "path": "nested/dir/app.conf", "mode": 0o600},
                        {"key": "blob", "path": "blob.bin"},
                    ],
                    "defaultMode": 0o640,
                },
            },
            {"name": "sec", "secret": {"secretName": "s", "defaultMode": 0o400}},
            {
                "name": "all",
                "projected": {
                    "defaultMode": 0o444,
                    "sources": [
                        {"configMap": {"name": "c", "items": [{"key": "tricky", "path": "t"}]}},
                        {"secret": {"name": "s", "items": [{"key": "pw", "path": "pw"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}
                                ]
                            }
                        },
                    ],
                },
            },
        ],
    )
    tricky = "-n %s \\ 'quoted' \"double\" $HOME `cmd`\n\ttab é"
    config = translate(
        pod,
        config_maps=[cm("c", {"app.conf": "a=1\n", "tricky": tricky}, {"blob": payload})],
        secrets=[secret("s", {"pw": b"hunter2", "other": b"x"})],
    )
    result = _run_script(script(config), tmp_path)
    assert result.returncode == 0, result.stderr

    def check(relative: str, content: bytes, mode: int) -> None:
        path = tmp_path / relative
        assert path.read_bytes() == content
        assert path.stat().st_mode & 0o777 == mode

    check("cfg/nested/dir/app.conf", b"a=1\n", 0o600)
    check("cfg/blob.bin", payload, 0o640)
    check("sec/pw", b"hunter2", 0o400)
    check("sec/other", b"x", 0o400)
    check("all/t", tricky.encode(), 0o444)
    check("all/pw", b"hunter2", 0o444)
    check("all/name", b"demo", 0o444)
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["blob.bin", "nested"]


def test_optional_missing_sources_give_an_empty_volume() -> None:
    pod = make_pod(
        container(volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}]),
        volumes=[{"name": "cfg", "configMap": {"name": "absent", "optional": True}}],
    )
    assert "mkdir -p /cfg\n" in script(translate(pod))


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        (
            {"configMap": {"name": "absent"}},
            "spec.volumes[0].configMap: ConfigMap 'absent' was not sent by interLink",
        ),
        (
            {"secret": {"secretName": "s", "items": [{"key": "nope", "path": "x"}]}},
            "spec.volumes[0].secret.items[0]: Secret 's' has no key 'nope'",
        ),
        (
            {"configMap": {"name": "c", "items": [{"key": "k", "path": "../escape"}]}},
            "spec.volumes[0].configMap.items[0].path: '../escape' must be a relative path "
            "without '..'",
        ),
        (
            {"configMap": {"name": "c", "items": [{"key": "k", "path": "/abs"}]}},
            "spec.volumes[0].configMap.items[0].path: '/abs' must be a relative path without '..'",
        ),
        (
            {
                "configMap": {
                    "name": "c",
                    "items": [{"key": "k", "path": "same"}, {"key": "j", "path": "same"}],
                }
            },
            "spec.volumes[0]: two files at the same path 'same'",
        ),
        (
            {"projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            "spec.volumes[0].projected.sources[0].serviceAccountToken: interLink sent no token "
            "for this volume",
        ),
        (
            {
                "downwardAPI": {
                    "items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]
                }
            },
            "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: required",
        ),
        (
            {"nfs": {"server": "nfs.example.org", "path": "/x"}},
            "spec.volumes[0] (nfs): volume kind not supported",
        ),
        ({"hostPath": {"path": "/srv"}}, "spec.volumes[0] (hostPath): volume kind not supported"),
        (
            {"persistentVolumeClaim": {"claimName": "data"}},
            "spec.volumes[0] (persistentVolumeClaim): volume kind not supported",
        ),
        ({"csi": {"driver": "x"}}, "spec.volumes[0] (csi): volume kind not supported"),
        (
            {"emptyDir": {"medium": "HugePages"}},
            "spec.volumes[0].emptyDir.medium: 'HugePages' is not supported",
        ),
    ],
)
def test_volumes_that_cannot_be_honoured(volume: dict[str, Any], expected: str) -> None:
    pod = make_pod(
        container(volumeMounts=[{"name": "v", "mountPath": "/v"}]),
        volumes=[{"name": "v", **volume}],
    )
    sent = {"config_maps": [cm("c", {"k": "1", "j": "2"})], "secrets": [secret("s", {"k": b"1"})]}
    assert refusal(pod, **sent) == expected


def test_memory_emptydir_can_be_accepted_on_disk() -> None:
    pod = make_pod(
        container(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}]),
        volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    )
    options = TranslationOptions(memory_emptydir_on_disk=True)
    volumes = allocation(translate(pod, options=options)).volume or ()
    assert [v.mount_destination for v in volumes] == ["/dev/shm"]


@pytest.mark.parametrize(
    ("mounts", "expected"),
    [
        (
            [{"name": "missing", "mountPath": "/m"}],
            "spec.containers[0].volumeMounts[0].name: no volume 'missing' in spec.volumes",
        ),
        (
            [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a/"}],
            "spec.containers[0].volumeMounts[1].mountPath: '/a' is also volumeMounts[0]",
        ),
        (
            [{"name": "v", "mountPath": "relative"}],
            "spec.containers[0].volumeMounts[0].mountPath: must be an absolute path without '..'",
        ),
        (
            [{"name": "v", "mountPath": "/d", "subPathExpr": "$(POD)"}],
            "spec.containers[0].volumeMounts[0].subPathExpr: not supported",
        ),
        (
            [{"name": "v", "mountPath": "/d", "mountPropagation": "Bidirectional"}],
            "spec.containers[0].volumeMounts[0].mountPropagation: not supported",
        ),
    ],
)
def test_mounts_that_cannot_be_honoured(mounts: list[dict[str, Any]], expected: str) -> None:
    pod = make_pod(container(volumeMounts=mounts), volumes=[{"name": "v", "emptyDir": {}}])
    assert refusal(pod) == expected


def test_a_mount_over_the_control_volume_is_refused() -> None:
    pod = make_pod(
        container(volumeMounts=[{"name": "v", "mountPath": "/"}]),
        initContainers=[container("init")],
        volumes=[{"name": "v", "emptyDir": {}}],
    )
    assert refusal(pod) == (
        "spec.containers[0].volumeMounts[0].mountPath: '/' overlaps the pod's control volume at "
        "/.dmsgw"
    )


# --- init containers -------------------------------------------------------------------------


def test_init_containers_run_in_order_before_the_main_containers() -> None:
    pod = make_pod(
        container("app"),
        container("sidecar"),
        initContainers=[container("first"), container("second"), container("third")],
    )
    config = translate(pod, options=TranslationOptions(generation=2))
    assert config.v1 is not None
    node = (config.v1.nodes or {})[POD_NODE]
    assert node.allocations == ("first", "second", "third", "app", "sidecar")
    depends = {name: allocation(config, name).depends_on for name in node.allocations or ()}
    assert depends == {
        "first": None,
        "second": ("first",),
        "third": ("second",),
        "app": ("third",),
        "sidecar": ("third",),
    }
    for name, waits_for in [("second", "first"), ("third", "second"), ("app", "third")]:
        assert f"while [ ! -e /.dmsgw/{waits_for}.done ]; do\n" in script(config, name)
    for name in ("first", "second", "third"):
        entrypoint = params(config, name)["entrypoint"]
        assert entrypoint[:2] == ["/bin/sh", "-c"] and entrypoint[3] == "dmsgw-pod"
        assert f": > /.dmsgw/{name}.done" in entrypoint[2]
        assert params(config, name)["cmd"] == ["sh", "-c", "true"]
        assert allocation(config, name).type == "task"
    assert ": > /.dmsgw/" not in params(config, "app")["entrypoint"][2]  # no completion marker
    assert params(config, "app")["cmd"] == ["sh", "-c", "true"]
    control = {
        v.src for name in node.allocations or () for v in allocation(config, name).volume or ()
    }
    assert control == {f"dmsgw.{UID}.ctl.2"}  # one control volume per deployment generation
    assert metadata(config)[METADATA_GENERATION] == "2"


def test_an_init_container_needs_a_command_to_be_wrapped() -> None:
    init = {"name": "init", "image": "busybox"}
    assert refusal(make_pod(container(), initContainers=[init])) == (
        "spec.initContainers[0].command: required: the gateway wraps the command of an init "
        "container or of a container with lifecycle hooks, and cannot wrap the image's own "
        "entrypoint"
    )


def _wrapper(config: EnsembleConfig, name: str, root: Path) -> list[str]:
    """The allocation's entrypoint + cmd, its control volume moved under ``root``."""
    p = params(config, name)
    entry = [part.replace(CONTROL_MOUNT, str(root)) for part in p["entrypoint"]]
    return entry + list(p.get("cmd", []))


@needs_sh
@pytest.mark.parametrize(("code", "marked"), [(0, True), (3, False)])
def test_the_init_wrapper_marks_completion_only_on_success(
    tmp_path: Path, code: int, marked: bool
) -> None:
    init = container("init", command=["sh", "-c", f"echo running; exit {code}"])
    config = translate(make_pod(container(), initContainers=[init]))
    (tmp_path / "init-failed").write_text("init\n")  # an earlier try in the same volume failed
    result = subprocess.run(_wrapper(config, "init", tmp_path), capture_output=True, text=True)
    # the run's start is marked on stdout too (each run's part of the log is cut there)
    assert (result.returncode, result.stdout) == (code, "dmsgw.io/started\nrunning\n")
    assert (tmp_path / "init.done").exists() is marked
    failed = tmp_path / "init-failed"
    assert (failed.read_text() if failed.exists() else None) == (None if marked else "init\n")


@needs_sh
@pytest.mark.parametrize(("failed", "code"), [(False, 0), (True, 1)])
def test_a_set_up_waiting_for_an_init_container_gives_up_when_one_failed(
    tmp_path: Path, failed: bool, code: int
) -> None:
    init = container("init", command=["sh", "-c", "true"])
    config = translate(make_pod(container(), initContainers=[init]))
    (tmp_path / ("init-failed" if failed else "init.done")).write_text("init\n")
    text = script(config).replace(CONTROL_MOUNT, str(tmp_path))
    result = subprocess.run(["sh", "-c", text], capture_output=True, text=True, timeout=30)
    assert result.returncode == code
    assert result.stderr == ("dmsgw: init container init failed\n" if failed else "")


# --- lifecycle hooks -------------------------------------------------------------------------


def _hooked(tmp_path: Path, post_start: str, command: str) -> list[str]:
    main = container(
        command=["sh", "-c", command],
        lifecycle={
            "postStart": {"exec": {"command": ["sh", "-c", post_start]}},
            "preStop": {"exec": {"command": ["sh", "-c", f"echo stopping > {tmp_path}/prestop"]}},
        },
    )
    return _wrapper(translate(make_pod(main)), "main", tmp_path)


@needs_sh
def test_hooks_run_around_the_container(tmp_path: Path) -> None:
    argv = _hooked(
        tmp_path,
        f"echo started > {tmp_path}/poststart",
        f"trap 'echo term > {tmp_path}/term; exit 7' TERM; : > {tmp_path}/trapped; "
        "while :; do sleep 0.05; done",
    )
    proc = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 10
    # postStart runs beside the container: wait for both, the container's trap included
    while time.monotonic() < deadline and not all(
        (tmp_path / name).exists() for name in ("poststart", "trapped")
    ):
        time.sleep(0.05)
    assert (tmp_path / "poststart").read_text() == "started\n"
    assert not (tmp_path / "prestop").exists()
    os.kill(proc.pid, signal.SIGTERM)  # to the wrapper only, as docker stop does
    assert proc.wait(timeout=10) == 7  # the container's own exit status
    assert (tmp_path / "prestop").read_text() == "stopping\n"
    assert (tmp_path / "term").read_text() == "term\n"


@needs_sh
def test_a_failing_post_start_hook_stops_the_container(tmp_path: Path) -> None:
    argv = _hooked(tmp_path, "exit 1", "while :; do sleep 0.05; done")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert result.returncode == 128 + signal.SIGTERM
    assert "the postStart hook failed" in result.stderr
    assert (tmp_path / "prestop").exists() is False


@needs_sh
@pytest.mark.parametrize(
    ("script", "code"),
    [
        ("exit 5", 5),
        ("kill -9 $$$$", 137),  # $$ is the kubelet's escape for $
        ("printf partial >&2", 0),
    ],
)
def test_a_plain_container_is_wrapped_and_reports_its_start_and_exit_on_stderr(
    tmp_path: Path, script: str, code: int
) -> None:
    config = translate(make_pod(container(command=["sh", "-c", f"echo out; {script}"])))
    result = subprocess.run(_wrapper(config, "main", tmp_path), capture_output=True, timeout=10)
    assert (result.returncode, result.stdout) == (code, b"dmsgw.io/started\nout\n")
    assert list(markers(result.stderr)) == [Marker(None), Marker(code)]


@pytest.mark.parametrize(
    ("lifecycle", "expected"),
    [
        (
            {"postStart": {"httpGet": {"port": 80}}},
            "spec.containers[0].lifecycle.postStart.httpGet: not supported: only exec hooks can "
            "be run",
        ),
        (
            {"preStop": {"tcpSocket": {"port": 80}}},
            "spec.containers[0].lifecycle.preStop.tcpSocket: not supported: only exec hooks can "
            "be run",
        ),
        (
            {"preStop": {"sleep": {"seconds": 5}}},
            "spec.containers[0].lifecycle.preStop.sleep: not supported",
        ),
        (
            {"preStop": {"exec": {"command": []}}},
            "spec.containers[0].lifecycle.preStop: an exec hook needs a command",
        ),
        ({"stopSignal": "SIGUSR1"}, "spec.containers[0].lifecycle.stopSignal: not supported"),
    ],
)
def test_hooks_that_cannot_be_honoured(lifecycle: dict[str, Any], expected: str) -> None:
    assert refusal(make_pod(container(lifecycle=lifecycle))) == expected


def test_a_hooked_container_needs_a_command() -> None:
    main = {
        "name": "main",
        "image": "nginx",
        "lifecycle": {"preStop": {"exec": {"command": ["x"]}}},
    }
    assert refusal(make_pod(main)).startswith("spec.containers[0].command: required")


# --- probes ----------------------------------------------------------------------------------


def test_a_wrapped_containers_probes_run_in_its_wrapper_and_are_recorded() -> None:
    main = container(
        ports=[{"name": "http", "containerPort": 8080}],
        livenessProbe={"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 20},
        readinessProbe={"httpGet": {"path": "ready", "port": "http"}, "initialDelaySeconds": 3},
        startupProbe={"tcpSocket": {"port": 8080}, "failureThreshold": 30},
    )
    config = translate(make_pod(main))
    # The DMS health check restarts whatever fails: the wrapper runs all three instead.
    assert allocation(config).healthcheck.is_empty()
    script = params(config)["entrypoint"][2]
    assert "dmsgw_probe startup 0 10 1 1 30 'TCP 127.0.0.1:8080' dmsgw_tcp" in script
    exec_probe = "'exec cat /tmp/healthy' dmsgw_exec cat /tmp/healthy"
    assert f"dmsgw_probe liveness 0 20 1 1 3 {exec_probe}" in script
    assert (
        "dmsgw_probe readiness 3 10 1 1 3 'HTTP GET http://127.0.0.1:8080/ready' dmsgw_http"
        in script
    )
    record = json.loads(metadata(config)[METADATA_PROBES_PREFIX + "main"])
    assert record == {
        "runner": "wrapper",
        "liveness": {
            "handler": "exec",
            "initialDelaySeconds": 0,
            "periodSeconds": 20,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "readiness": {
            "handler": "httpGet",
            "initialDelaySeconds": 3,
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "startup": {
            "handler": "tcpSocket",
            "initialDelaySeconds": 0,
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 30,
        },
    }


@pytest.mark.parametrize(
    ("probe", "check"),
    [
        (
            {"httpGet": {"path": "/live", "port": 8080, "scheme": "HTTPS"}},
            HealthCheckManifest(
                type="http", endpoint="https://127.0.0.1:8080/live", interval=10_000_000_000
            ),
        ),
        (
            {"tcpSocket": {"port": 5432, "host": "db"}, "periodSeconds": 2},
            HealthCheckManifest(
                type="command", exec=("nc", "-z", "db", "5432"), interval=2_000_000_000
            ),
        ),
        (
            {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 20},
            HealthCheckManifest(
                type="command", exec=("cat", "/tmp/healthy"), interval=20_000_000_000
            ),
        ),
    ],
)
def test_an_unwrapped_containers_liveness_probe_is_the_dms_health_check(
    probe: dict[str, Any], check: HealthCheckManifest
) -> None:
    main = container(livenessProbe=probe)
    del main["command"]  # the image's own entrypoint: no wrapper
    config = translate(make_pod(main))
    assert allocation(config).healthcheck == check
    assert json.loads(metadata(config)[METADATA_PROBES_PREFIX + "main"])["runner"] == "dms"


@pytest.mark.parametrize("kind", ["readiness", "startup"])
@pytest.mark.parametrize("annotated", [False, True])
def test_an_unwrapped_containers_readiness_or_startup_probe_is_refused(
    kind: str, annotated: bool
) -> None:
    """The DMS's check could only stand for it by restarting the container: a clear refusal,
    not a probe that silently never runs."""
    main = container(**{f"{kind}Probe": {"exec": {"command": ["true"]}}})
    pod = make_pod(main)
    if annotated:
        pod["metadata"]["annotations"] = {UNWRAPPED_ANNOTATION: "main"}
    else:
        del main["command"]
    assert refusal(pod) == (
        f"spec.containers[0].{kind}Probe: not supported for a container that runs unwrapped "
        "(without a command, or named in the pod's dmsgw.io/unwrapped-containers): the "
        "gateway runs readiness and startup probes in its wrapper around the container's "
        "command, and the DMS's own health check can only stand for a livenessProbe"
    )


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (
            {"livenessProbe": {"grpc": {"port": 9000}}},
            "spec.containers[0].livenessProbe.grpc: not supported",
        ),
        (
            {"livenessProbe": {"httpGet": {"port": "web"}}},
            "spec.containers[0].livenessProbe.httpGet.port: the container has no port named 'web'",
        ),
        (
            {"readinessProbe": {"exec": {"command": []}}},
            "spec.containers[0].readinessProbe.exec.command: required",
        ),
        (
            {"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}},
            "spec.containers[0].livenessProbe.successThreshold: must be 1 for a liveness probe",
        ),
        (
            {"startupProbe": {"exec": {"command": ["true"]}, "periodSeconds": 0}},
            "spec.containers[0].startupProbe.periodSeconds: must be at least 1",
        ),
    ],
)
def test_probes_that_cannot_be_honoured(probe: dict[str, Any], expected: str) -> None:
    assert refusal(make_pod(container(**probe))) == expected


def test_an_init_container_has_no_probes() -> None:
    """Kubernetes refuses them; a probe on an init container would otherwise never run."""
    pod = make_pod(
        container(), initContainers=[container("setup", startupProbe={"exec": {"command": ["x"]}})]
    )
    assert refusal(pod) == "spec.initContainers[0].startupProbe: an init container has no probes"


# --- restart policy, ports, placement --------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "main_type", "recovery"),
    [
        ("Always", "service", "one_for_one"),
        ("OnFailure", "task", "one_for_one"),
        ("Never", "task", "stay_down"),
    ],
)
def test_restart_policy(policy: str, main_type: str, recovery: str) -> None:
    pod = make_pod(container(), initContainers=[container("init")], restartPolicy=policy)
    config = translate(pod)
    assert (allocation(config).type, allocation(config).failure_recovery) == (main_type, recovery)
    assert (allocation(config, "init").type, allocation(config, "init").failure_recovery) == (
        "task",
        recovery,
    )
    assert metadata(config)[METADATA_RESTART_POLICY] == policy


def node_ports(config: EnsembleConfig) -> list[tuple[int, int, str]]:
    assert config.v1 is not None
    return [
        (p.public, p.private, p.allocation) for p in (config.v1.nodes or {})[POD_NODE].ports or ()
    ]


def test_every_container_port_is_published() -> None:
    """A hostPort is the public port; a port without one gets a public port the gateway picks
    within the DMS's range, the same for the same pod and deployment, another for the next."""
    pod = make_pod(
        container(ports=[{"containerPort": 8080, "hostPort": 18080}]),
        container("side", ports=[{"containerPort": 9090, "name": "metrics"}]),
    )
    first = node_ports(translate(pod))
    assert first[0] == (18080, 8080, "main")
    (public, private, allocation) = first[1]
    assert (private, allocation) == (9090, "side")
    assert DMS_PORT_RANGE.start <= public < DMS_PORT_RANGE.stop
    assert node_ports(translate(pod)) == first
    later = node_ports(translate(pod, options=TranslationOptions(generation=1)))
    assert later[0] == first[0] and later[1][0] != public


def test_a_chosen_port_is_never_a_host_port_of_the_pod() -> None:
    side = container("side", ports=[{"containerPort": 9090}])
    ((chosen, _, _),) = node_ports(translate(make_pod(side)))
    pod = make_pod(container(ports=[{"containerPort": 80, "hostPort": chosen}]), side)
    ports = node_ports(translate(pod))
    assert ports[0] == (chosen, 80, "main")
    assert ports[1][0] != chosen and DMS_PORT_RANGE.start <= ports[1][0] < DMS_PORT_RANGE.stop


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        (
            [{"containerPort": 53, "hostPort": 25353, "protocol": "UDP"}],
            "spec.containers[0].ports[0].protocol: UDP is not forwarded: "
            "a DMS port mapping carries TCP only",
        ),
        (
            [{"containerPort": 80}, {"containerPort": 5060, "protocol": "SCTP"}],
            "spec.containers[0].ports[1].protocol: SCTP is not forwarded: "
            "a DMS port mapping carries TCP only",
        ),
        (
            [{"containerPort": 80, "hostPort": 8080}],
            "spec.containers[0].ports[0].hostPort: must be within 16384-65535, "
            "the public ports a DMS node gives",
        ),
        (
            [{"containerPort": 80, "hostPort": 18080, "hostIP": "10.0.0.1"}],
            "spec.containers[0].ports[0].hostIP: not supported: the DMS picks the address",
        ),
        (
            [{"containerPort": 80, "hostPort": 18080}, {"containerPort": 81, "hostPort": 18080}],
            "spec.containers[0].ports[1].hostPort: 18080 is also "
            "spec.containers[0].ports[0].hostPort",
        ),
        (  # Kubernetes refuses it too: a probe naming "web" would pick one of them silently
            [{"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}],
            "spec.containers[0].ports[1].name: 'web' is also spec.containers[0].ports[0].name",
        ),
    ],
)
def test_ports_that_cannot_be_published(ports: list[dict[str, Any]], expected: str) -> None:
    assert refusal(make_pod(container(ports=ports))) == expected


def test_annotations_pin_and_exclude_peers() -> None:
    pod = make_pod()
    pod["metadata"]["annotations"] = {
        PEER_ANNOTATION: f" {PEER} ",
        EXCLUDE_PEERS_ANNOTATION: f"{OTHER_PEER}, ,{OTHER_PEER}",
    }
    config = translate(pod)
    assert config.v1 is not None
    assert (config.v1.nodes or {})[POD_NODE].peer == PEER
    assert config.v1.exclude_peers == (OTHER_PEER,)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (
            {PEER_ANNOTATION: "not-a-peer"},
            "metadata.annotations[\"nunet.io/peer\"]: peer ID 'not-a-peer' is not base58btc",
        ),
        (
            {PEER_ANNOTATION: f"{PEER},{OTHER_PEER}"},
            'metadata.annotations["nunet.io/peer"]: name one peer (use nunet.io/exclude-peers '
            "to avoid others)",
        ),
        (
            {PEER_ANNOTATION: PEER, EXCLUDE_PEERS_ANNOTATION: PEER},
            f'metadata.annotations["nunet.io/exclude-peers"]: excludes the pinned peer {PEER}',
        ),
    ],
)
def test_placement_annotations_that_cannot_be_honoured(
    annotations: dict[str, str], expected: str
) -> None:
    pod = make_pod()
    pod["metadata"]["annotations"] = annotations
    assert refusal(pod) == expected


def test_scheduler_only_fields_have_no_effect() -> None:
    """Selectors, tolerations and priorities chose our virtual node; nothing more to do."""
    plain = translate(make_pod())
    pod = make_pod(
        nodeSelector={"kubernetes.io/hostname": "nunet"},
        tolerations=[{"key": "virtual-node.interlink/no-schedule", "operator": "Exists"}],
        schedulerName="default-scheduler",
        priority=0,
        dnsPolicy="ClusterFirst",
        enableServiceLinks=True,
        securityContext={},
        os={"name": "linux"},
    )
    assert translate(pod).to_json() == plain.to_json()


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda p: p["metadata"].pop("uid"),
            "metadata.uid: required: the pod's volumes are named by it",
        ),
        (
            lambda p: p["spec"].update(containers=[]),
            "spec.containers: a pod needs at least one container",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(securityContext={"privileged": True}),
            "spec.containers[0].securityContext.privileged: not supported: the DMS runs "
            "containers with its own user and privileges",
        ),
        (
            lambda p: p["spec"].update(securityContext={"fsGroup": 2000}),
            "spec.securityContext.fsGroup: not supported: the DMS runs containers with its own "
            "user and privileges",
        ),
        (lambda p: p["spec"].update(hostNetwork=True), "spec.hostNetwork: not supported"),
        (
            lambda p: p["spec"].update(runtimeClassName="gvisor"),
            "spec.runtimeClassName: not supported",
        ),
        (
            lambda p: p["spec"].update(os={"name": "windows"}),
            "spec.os: not supported",
        ),
        (
            lambda p: p["spec"].update(imagePullSecrets=[{"name": "regcred"}]),
            "spec.imagePullSecrets: not supported: registry credentials cannot reach the DMS",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(stdin=True),
            "spec.containers[0].stdin: not supported",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(envFrom=[{"configMapRef": {"name": "c"}}]),
            "spec.containers[0].envFrom: not supported",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                resources={"limits": {"hugepages-2Mi": "1Gi"}}
            ),
            'spec.containers[0].resources.limits["hugepages-2Mi"]: resource not supported',
        ),
        (
            lambda p: p["spec"]["containers"][0].update(
                resources={"requests": {"example.com/fpga": "1"}}
            ),
            'spec.containers[0].resources.requests["example.com/fpga"]: resource not supported',
        ),
        (
            lambda p: p["spec"]["containers"][0].update(resources={"limits": {"memory": "1e30"}}),
            "spec.containers[0].resources: memory is out of range",
        ),
        (
            lambda p: p["spec"].update(initContainers=[container("init", restartPolicy="Always")]),
            "spec.initContainers[0].restartPolicy: not supported",
        ),
        (
            lambda p: p["spec"].update(containers=[container("x"), container("x")]),
            "spec.containers[1].name: 'x' is also spec.containers[0]",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(image="busybox@sha256:" + "a" * 64),
            "spec.containers[0].image: 'busybox@sha256:" + "a" * 64 + "' is not a valid docker "
            "image reference",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(workingDir="rel/dir"),
            "spec.containers[0].workingDir: must be an absolute path",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(name="Not_A_Hostname"),
            "spec.containers[0]: the DMS refuses it: allocations.Not_A_Hostname: the name must "
            "be a valid hostname",
        ),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(
    mutate: Callable[[dict[str, Any]], object], expected: str
) -> None:
    pod = make_pod()
    mutate(pod)
    assert refusal(pod) == expected


# --- determinism and robustness --------------------------------------------------------------


def test_the_same_pod_gives_byte_identical_ensembles() -> None:
    pod = load("create_v05_example.json")
    first = pod_to_ensemble(RetrievedPodData.model_validate(pod)).to_json()
    # the same pod with its maps' keys in another order
    shuffled = copy.deepcopy(pod)
    for c in shuffled["container"]:
        for m in c["projectedvolumemaps"] or []:
            m["data"] = dict(reversed(list(m["data"].items())))
    shuffled["pod"]["metadata"] = dict(reversed(list(shuffled["pod"]["metadata"].items())))
    again = pod_to_ensemble(RetrievedPodData.model_validate(shuffled)).to_json()
    assert again == first
    assert EnsembleConfig.from_json(first).to_json() == first


_NAMES = st.sampled_from(
    ["", "", "", "", "", "", "", "", "dup", "Bad_Name"]
)  # "": a fresh unique name
_VOLUME_NAMES = st.sampled_from(["v1", "v2", "v3"])
_VOLUMES = st.one_of(
    st.builds(lambda n: {"name": n, "emptyDir": {}}, _VOLUME_NAMES),
    st.builds(
        lambda n, medium, limit: {"name": n, "emptyDir": {"medium": medium, "sizeLimit": limit}},
        _VOLUME_NAMES,
        st.sampled_from(["", "", "", "Memory"]),
        st.sampled_from(["1Gi", "100M"]),
    ),
    st.builds(
        lambda n, cmn, items, opt: {
            "name": n,
            "configMap": {"name": cmn, "items": items, "optional": opt},
        },
        _VOLUME_NAMES,
        st.sampled_from(["cm", "missing"]),
        st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["k", "j", "x"]),
                    "path": st.sampled_from(["k", "d/j", "../x", "k"]),
                }
            ),
            max_size=2,
        ),
        st.booleans(),
    ),
    st.builds(lambda n: {"name": n, "secret": {"secretName": "sec"}}, _VOLUME_NAMES),
    st.builds(lambda n: {"name": n, "nfs": {"server": "s", "path": "/p"}}, _VOLUME_NAMES),
    st.builds(lambda n: {"name": n, "emptyDir": {}}, _VOLUME_NAMES),
)
_ENV = st.one_of(
    st.builds(
        lambda n, v: {"name": n, "value": v},
        st.sampled_from(["A", "B", "x.y"]),
        st.text(max_size=8),
    ),
    st.builds(
        lambda n, k, o: {
            "name": n,
            "valueFrom": {"configMapKeyRef": {"name": "cm", "key": k, "optional": o}},
        },
        st.sampled_from(["A", "C"]),
        st.sampled_from(["k", "nokey"]),
        st.booleans(),
    ),
    st.builds(
        lambda n, f: {"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}},
        st.sampled_from(["POD", "NS"]),
        st.sampled_from(["metadata.name", "metadata.labels['a']", "status.podIP", "spec.x"]),
    ),
)
_QUANTITY = st.sampled_from(["0", "100m", "1", "2.5", "1Gi", "512Mi", "3"])
_CONTAINERS = st.builds(
    lambda name, image, command, args, env, mounts, res, probe, hook: {
        "name": name,
        "image": image,
        "command": command,
        "args": args,
        "env": env,
        "volumeMounts": mounts,
        "resources": res,
        **probe,
        **hook,
    },
    _NAMES,
    st.sampled_from(["busybox", "python:3.11", "registry.io/a/b:1.0", "busybox", "x@sha256:00"]),
    st.lists(st.text(max_size=6), max_size=3),
    st.lists(st.text(max_size=6), max_size=2),
    st.lists(_ENV, max_size=3),
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["v1", "v2", "v3", "v1", "v2", "v3", "nope"]),
                "mountPath": st.sampled_from(["/data", "/etc/x", "/data/sub", "/.dmsgw", "rel"]),
                "readOnly": st.booleans(),
            }
        ),
        max_size=3,
        unique_by=lambda m: m["mountPath"],
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "limits": st.fixed_dictionaries(
                {},
                optional={
                    "cpu": _QUANTITY,
                    "memory": _QUANTITY,
                    "nvidia.com/gpu": st.sampled_from(["1", "2", "500m"]),
                    "nunet.gpu.nvidia.rtx.3080.10gb": st.just("1"),
                },
            ),
            "requests": st.one_of(
                *[st.fixed_dictionaries({}, optional={"cpu": _QUANTITY, "memory": _QUANTITY})] * 5,
                st.just({"example.com/foo": "1"}),
            ),
        },
    ),
    st.sampled_from(
        [
            {},
            {"livenessProbe": {"exec": {"command": ["true"]}}},
            {"readinessProbe": {"httpGet": {"port": "http"}}},
            {"startupProbe": {"tcpSocket": {"port": 80}}},
        ]
    ),
    st.sampled_from([{}, {"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "x"]}}}}]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    containers=st.lists(_CONTAINERS, min_size=1, max_size=3),
    init=st.lists(_CONTAINERS, max_size=2),
    volumes=st.lists(_VOLUMES, max_size=3, unique_by=lambda v: v["name"]),
    policy=st.sampled_from(["Always", "OnFailure", "Never"]),
    gpu_type=st.sampled_from([None, None, None, "nunet.gpu.nvidia.rtx.3080.10gb", "bogus"]),
)
def test_any_pod_gives_a_valid_ensemble_or_a_translation_error(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    policy: str,
    gpu_type: str | None,
) -> None:
    for i, c in enumerate([*init, *containers]):
        c["name"] = c["name"] or f"c{i}"
    spec: dict[str, Any] = {"initContainers": init, "volumes": volumes, "restartPolicy": policy}
    if gpu_type:
        spec["nodeSelector"] = {"gpu-type": gpu_type}
    pod = make_pod(*containers, **spec)
    pod["metadata"]["labels"] = {"a": "b"}
    body = data(
        pod,
        config_maps=[cm("cm", {"k": "v", "j": "w"})],
        secrets=[secret("sec", {"s": b"\x00\xff"})],
    )
    options = TranslationOptions(gpu_models={"nvidia.rtx.3080.10gb": RTX3080})
    try:
        config = pod_to_ensemble(body, options=options)
    except PodTranslationError as exc:
        assert str(exc).startswith(("spec", "metadata"))
        return
    assert validate_ensemble(config) == ()
    encoded = config.to_json()
    assert pod_to_ensemble(body, options=options).to_json() == encoded
    assert EnsembleConfig.from_json(encoded).to_json() == encoded


def _annotated(pod: dict[str, Any], names: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = {UNWRAPPED_ANNOTATION: names}
    return pod


def test_containers_named_unwrapped_run_their_command_as_it_is() -> None:
    pod = _annotated(
        make_pod(
            container("app", command=["/app"], args=["--serve"]),
            container("sidecar", command=["sh", "-c", "sleep 1"]),
        ),
        " app ,",
    )
    config = translate(pod)
    assert params(config, "app")["entrypoint"] == ["/app"]
    assert params(config, "app")["cmd"] == ["--serve"]
    assert params(config, "sidecar")["entrypoint"][:2] == ["/bin/sh", "-c"]
    spec = k8s.Pod.model_validate(pod)
    assert [is_wrapped(spec, c) for c in spec.spec.containers] == [False, True]


@pytest.mark.parametrize(
    ("names", "extra", "expected"),
    [
        (
            "app,sidcar",
            {},
            'metadata.annotations["dmsgw.io/unwrapped-containers"]: no container named '
            "'sidcar' in the pod",
        ),
        (
            "init",
            {"initContainers": [container("init")]},
            "metadata.annotations[\"dmsgw.io/unwrapped-containers\"]: 'init' cannot run "
            "unwrapped: the gateway runs an init container's or a lifecycle hook's ordering "
            "through its wrapper",
        ),
    ],
)
def test_unwrapped_containers_are_checked(names: str, extra: Any, expected: str) -> None:
    pod = _annotated(make_pod(container("app"), **extra), names)
    assert refusal(pod) == expected


def test_a_pod_name_cannot_end_the_set_up_scripts_comment() -> None:
    pod = make_pod(container(), initContainers=[container("init")])
    pod["metadata"]["name"] = "demo\ntouch /tmp/owned #"
    text = script(translate(pod))
    assert not any(line.startswith("touch") for line in text.splitlines())
