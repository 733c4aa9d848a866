"""Ensemble configuration: Go field order and omitempty, and validation that names paths."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dmsgw.behaviors import (
    CPU,
    GPU,
    RAM,
    AllocationConfig,
    AllocationKey,
    ContractConfig,
    Disk,
    EdgeConstraint,
    EnsembleConfig,
    EnsembleConfigV1,
    EnsembleValidationError,
    HealthCheckManifest,
    Location,
    LocationConstraints,
    NodeConfig,
    PortConfig,
    Resources,
    SpecConfig,
    SubnetConfig,
    SupervisorConfig,
    VolumeConfig,
    check_ensemble,
    validate_ensemble,
)
from dmsgw.behaviors.deployment import NewDeploymentRequest
from dmsgw.behaviors.ensemble import HealthCheckResponse
from tests.support.go_values import DID, FULL_JSON, HOST_DID, OTHER_PEER, PEER

GIB = 1 << 30

WEB = AllocationConfig(
    executor="docker",
    type="service",
    resources=Resources(
        CPU(clock_speed=2.4e9, cores=1.5),
        (GPU(index=0, vendor="NVIDIA", model="T4", vram=16 * GIB),),
        RAM(2 * GIB),
        Disk(10 * GIB),
    ),
    execution=SpecConfig(
        "docker",
        {"image": "nginx:1.25", "environment": ["A=1"], "cmd": ["nginx", "-g", "daemon off;"]},
    ),
    dns_name="web",
    keys=(AllocationKey("ssh", "ssh-ed25519 AAAA", ""), AllocationKey("gpg", "KEY", "/root/k")),
    provision=("setup",),
    healthcheck=HealthCheckManifest(
        "http", None, "http://localhost/", HealthCheckResponse("string", "ok"), 30 * 10**9
    ),
    volume=(
        VolumeConfig(
            type="glusterfs",
            mount_destination="/data",
            read_only=True,
            name="vol",
            servers=("gfs1",),
            client_private_key="K",
            client_pem="P",
            client_ca="C",
        ),
    ),
    failure_recovery="one_for_all",
    depends_on=("db",),
)
DB = AllocationConfig(
    executor="docker",
    type="service",
    resources=Resources(CPU(cores=1), None, RAM(GIB), Disk(GIB)),
    execution=SpecConfig("docker", {"image": "postgres"}),
    volume=(VolumeConfig(type="local", mount_destination="/var/lib/pg", src="/srv/pg"),),
)
FULL = EnsembleConfig(
    EnsembleConfigV1(
        escalation_strategy="teardown",
        allocations={"web": WEB, "db": DB},
        nodes={
            "n1": NodeConfig(
                allocations=("db", "web"),
                ports=(PortConfig(8443, 443, "web"),),
                location=LocationConstraints(
                    accept=(Location("Europe", "DE", "Berlin", 3320, "DTAG"),),
                    reject=(Location(continent="Asia"),),
                ),
                peer=PEER,
                redundancy=2,
                failure_recovery="restart",
            ),
            "n2": NodeConfig(allocations=()),
        },
        edges=(EdgeConstraint("n1", "n2", rtt=20, bw=10**9),),
        supervisor=SupervisorConfig(
            "OneForOne", ("db",), (SupervisorConfig("RestForOne", ("web",)),)
        ),
        keys={"admin": "ssh-ed25519 AAAA"},
        scripts={"setup": b"#!/bin/sh\necho <ok>\n"},
        subnet=SubnetConfig(join=True),
        exclude_peers=(OTHER_PEER,),
        metadata={"pod-uid": "1234", "namespace": "default"},
        contracts={"c1": ContractConfig(did=DID, host=HOST_DID)},
    )
)


def test_a_complete_ensemble_marshals_in_go_field_order() -> None:
    assert FULL.to_json().decode() == FULL_JSON


def test_a_complete_ensemble_decodes_back() -> None:
    assert EnsembleConfig.from_json(FULL_JSON) == FULL
    wire = NewDeploymentRequest(FULL).to_json()
    assert wire == b'{"Ensemble":' + FULL_JSON.encode() + b"}"
    assert NewDeploymentRequest.from_json(wire).ensemble == FULL


def test_a_complete_ensemble_is_valid() -> None:
    assert validate_ensemble(FULL) == ()
    check_ensemble(FULL)


def test_the_empty_configuration_marshals_like_go() -> None:
    assert EnsembleConfig().to_json() == b'{"v1":null}'
    assert EnsembleConfig(EnsembleConfigV1()).to_json() == (
        b'{"v1":{"escalation_strategy":"","allocations":null,"nodes":null,'
        b'"supervisor":{},"subnet":{}}}'
    )


# --- validation -------------------------------------------------------------------------

MINIMAL_ALLOC = AllocationConfig(
    executor="docker",
    type="task",
    resources=Resources(CPU(cores=1), None, RAM(GIB), Disk(GIB)),
    execution=SpecConfig("docker", {"image": "hello-world"}),
    dns_name="alloc1",
    failure_recovery="stay_down",
)
MINIMAL = EnsembleConfigV1(
    allocations={"alloc1": MINIMAL_ALLOC},
    nodes={"node1": NodeConfig(allocations=("alloc1",), failure_recovery="stay_down")},
)


def _problems(spec: EnsembleConfigV1) -> list[str]:
    return [str(p) for p in validate_ensemble(EnsembleConfig(spec))]


def _alloc(**changes: Any) -> EnsembleConfigV1:
    return dataclasses.replace(
        MINIMAL, allocations={"alloc1": dataclasses.replace(MINIMAL_ALLOC, **changes)}
    )


def _node(**changes: Any) -> EnsembleConfigV1:
    assert MINIMAL.nodes is not None
    return dataclasses.replace(
        MINIMAL, nodes={"node1": dataclasses.replace(MINIMAL.nodes["node1"], **changes)}
    )


def _resources(**parts: Any) -> EnsembleConfigV1:
    return _alloc(resources=dataclasses.replace(MINIMAL_ALLOC.resources, **parts))


def test_the_minimal_ensemble_is_valid() -> None:
    assert _problems(MINIMAL) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (_resources(ram=RAM(0)), "allocations.alloc1.resources.ram.size: must be > 0"),
        (_resources(disk=Disk(0)), "allocations.alloc1.resources.disk.size: must be > 0"),
        (_resources(cpu=CPU(cores=0)), "allocations.alloc1.resources.cpu.cores: must be > 0"),
        (
            _alloc(executor="kubernetes"),
            "allocations.alloc1.executor: 'kubernetes' is not one of docker, firecracker, "
            "containerd, null",
        ),
        (_alloc(executor=""), "allocations.alloc1.executor: required"),
        (
            _alloc(type="batch"),
            "allocations.alloc1.type: 'batch' is not one of service, task",
        ),
        (
            _alloc(execution=SpecConfig("firecracker", {})),
            "allocations.alloc1.execution.type: 'firecracker' does not match the executor 'docker'",
        ),
        (
            _alloc(execution=SpecConfig("docker", {})),
            "allocations.alloc1.execution.params.image: required",
        ),
        (
            _alloc(execution=SpecConfig("docker", {"image": "Bad Image!"})),
            "allocations.alloc1.execution.params.image: 'Bad Image!' is not a valid docker "
            "image reference",
        ),
        (
            _alloc(execution=SpecConfig("docker", {"image": "x", "environment": ["1X=2"]})),
            "allocations.alloc1.execution.params.environment[0]: '1X' is not a valid "
            "environment variable name",
        ),
        (
            _alloc(execution=SpecConfig("docker", {"image": "x", "environment": ["NOVALUE"]})),
            "allocations.alloc1.execution.params.environment[0]: 'NOVALUE' is not in "
            '"KEY=VALUE" form',
        ),
        (
            _alloc(execution=SpecConfig("docker", {"image": "x", "restart_policy": "sometimes"})),
            "allocations.alloc1.execution.params.restart_policy: 'sometimes' is not one of no, "
            "on-failure, always, unless-stopped",
        ),
        (
            _alloc(executor="firecracker", execution=SpecConfig("firecracker", {})),
            "allocations.alloc1.execution.params.kernel_image: required for firecracker",
        ),
        (_alloc(dns_name="no_underscores"), "allocations.alloc1.dns_name: 'no_underscores' is "
         "not a valid DNS name"),
        (
            _alloc(failure_recovery="retry"),
            "allocations.alloc1.failure_recovery: 'retry' is not one of stay_down, one_for_one, "
            "one_for_all, rest_for_one",
        ),
        (_alloc(depends_on=("ghost",)), "allocations.alloc1.depends_on: allocation 'ghost' is "
         "not defined"),
        (_alloc(depends_on=("alloc1",)), "allocations.alloc1.depends_on: an allocation cannot "
         "depend on itself"),
        (_alloc(keys=(AllocationKey("x509", "K", "/k"),)), "allocations.alloc1.keys[0].type: "
         "'x509' is not one of ssh, gpg"),
        (_alloc(keys=(AllocationKey("gpg", "K", ""),)), "allocations.alloc1.keys[0].dest: "
         "required for keys other than ssh"),
        (_alloc(provision=("setup",)), "allocations.alloc1.provision[0]: script 'setup' is not "
         "defined"),
        (
            _alloc(healthcheck=HealthCheckManifest(type="http")),
            "allocations.alloc1.healthcheck.endpoint: required for an http health check",
        ),
        (
            _alloc(healthcheck=HealthCheckManifest(type="tcp", endpoint=":80")),
            "allocations.alloc1.healthcheck.type: 'tcp' is not one of http, command",
        ),
        (
            _alloc(volume=(VolumeConfig(type="glusterfs", mount_destination="/d"),)),
            "allocations.alloc1.volume[0].servers: a glusterfs volume needs at least one server",
        ),
        (
            _alloc(volume=(VolumeConfig(type="local", src="rel/path", mount_destination="/d"),)),
            "allocations.alloc1.volume[0].src: a local path must be absolute",
        ),
        (
            _alloc(volume=(VolumeConfig(type="local", src="data"),)),
            "allocations.alloc1.volume[0].mount_destination: required",
        ),
        (_node(allocations=()), "allocations.alloc1: not placed on any node"),
        (
            _node(ports=(PortConfig(80, 8080, "alloc1"),)),
            "nodes.node1.ports[0].public: must be 0 (any) or within 1025-65535",
        ),
        (
            _node(ports=(PortConfig(8080, 0, "alloc1"),)),
            "nodes.node1.ports[0].private: must be a port number (1-65535)",
        ),
        (
            _node(ports=(PortConfig(8080, 80, "ghost"),)),
            "nodes.node1.ports[0].allocation: allocation 'ghost' is not defined",
        ),
        (
            _node(failure_recovery="reboot"),
            "nodes.node1.failure_recovery: 'reboot' is not one of stay_down, restart, redeploy",
        ),
        (_node(redundancy=-1), "nodes.node1.redundancy: must not be negative"),
        (
            _node(location=LocationConstraints(accept=(Location(country="DE", city="Berlin"),))),
            "nodes.node1.location.accept[0].continent: required when giving a location",
        ),
        (
            _node(location=LocationConstraints(reject=(Location("Europe", city="Paris"),))),
            "nodes.node1.location.reject[0].country: required when a city is given",
        ),
        (
            dataclasses.replace(MINIMAL, escalation_strategy="panic"),
            "escalation_strategy: 'panic' is not one of redeploy, teardown",
        ),
        (
            dataclasses.replace(MINIMAL, edges=(EdgeConstraint("node1", "node9"),)),
            "edges[0]: node 'node9' is not defined in nodes",
        ),
        (
            dataclasses.replace(MINIMAL, edges=(EdgeConstraint("node1", "node1"),)),
            "edges[0]: source and target must be different nodes",
        ),
        (
            dataclasses.replace(
                MINIMAL, supervisor=SupervisorConfig(children=(SupervisorConfig("Any", ("x",)),))
            ),
            "supervisor.children[0].strategy: 'Any' is not one of OneForOne, AllForOne, RestForOne",
        ),
        (
            dataclasses.replace(MINIMAL, contracts={"c": ContractConfig(did="urn:x")}),
            "contracts.c.did: must be a DID (did:…)",
        ),
        (
            dataclasses.replace(MINIMAL, allocations={}),
            "allocations: at least one allocation must be defined",
        ),
    ],
)  # fmt: skip
def test_validation_errors_name_the_path(spec: EnsembleConfigV1, expected: str) -> None:
    assert expected in _problems(spec)


def test_placement_rules() -> None:
    second = dataclasses.replace(MINIMAL_ALLOC, dns_name="alloc2", depends_on=("alloc1",))
    spec = EnsembleConfigV1(
        allocations={"alloc1": MINIMAL_ALLOC, "alloc2": second},
        nodes={
            "node1": NodeConfig(allocations=("alloc1", "ghost")),
            "node2": NodeConfig(allocations=("alloc2",)),
            "node3": NodeConfig(allocations=("alloc1",)),
        },
    )
    assert _problems(spec) == [
        "nodes.node1.allocations[1]: allocation 'ghost' is not defined",
        "allocations.alloc2.depends_on: 'alloc1' must be on the same node ('node2')",
        "nodes.node3.allocations[0]: allocation 'alloc1' is already placed on node 'node1'",
    ]


def test_names_must_be_hostnames_and_unique() -> None:
    spec = EnsembleConfigV1(
        allocations={
            "Web": dataclasses.replace(MINIMAL_ALLOC, dns_name="shared"),
            "web": dataclasses.replace(MINIMAL_ALLOC, dns_name="shared"),
            "bad_name": MINIMAL_ALLOC,
        },
        nodes={"n": NodeConfig(allocations=("Web", "web", "bad_name"))},
    )
    assert _problems(spec) == [
        "allocations.bad_name: the name must be a valid hostname",
        "allocations.web: same name as 'Web' (names are case-insensitive)",
        "allocations.web.dns_name: 'shared' is already used by 'Web'",
    ]


def test_dependency_cycles_are_found() -> None:
    a = dataclasses.replace(MINIMAL_ALLOC, dns_name="a", depends_on=("b",))
    b = dataclasses.replace(MINIMAL_ALLOC, dns_name="b", depends_on=("c",))
    c = dataclasses.replace(MINIMAL_ALLOC, dns_name="c", depends_on=("a",))
    spec = EnsembleConfigV1(
        allocations={"a": a, "b": b, "c": c}, nodes={"n": NodeConfig(allocations=("a", "b", "c"))}
    )
    assert _problems(spec) == ["allocations.a.depends_on: cyclic dependency: a -> b -> c -> a"]


def test_check_ensemble_reports_every_problem() -> None:
    spec = _alloc(type="", resources=Resources())
    with pytest.raises(EnsembleValidationError) as caught:
        check_ensemble(EnsembleConfig(spec))
    assert [p.path for p in caught.value.problems] == [
        "allocations.alloc1.type",
        "allocations.alloc1.resources.cpu.cores",
        "allocations.alloc1.resources.ram.size",
        "allocations.alloc1.resources.disk.size",
    ]
    assert str(caught.value).startswith("4 problems:\n  allocations.alloc1.type: required")


def test_a_missing_v1_is_refused() -> None:
    with pytest.raises(EnsembleValidationError, match=r"^v1: missing"):
        check_ensemble(EnsembleConfig())
