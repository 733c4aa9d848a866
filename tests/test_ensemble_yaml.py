"""Ensemble YAML files: the DMS CLI's conversions, unit parsing, and errors that name paths."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from dmsgw.behaviors import (
    EnsembleConfig,
    EnsembleYamlError,
    load_ensemble_yaml,
    parse_ensemble_yaml,
)
from dmsgw.behaviors.deployment import NewDeploymentRequest
from dmsgw.behaviors.units import UnitError, parse_bytes, parse_clock_hz, parse_go_duration

DATA = Path(__file__).parent / "data" / "ensembles"
PEER = "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"
GIB = 1 << 30
MIB = 1 << 20
NO_HEALTHCHECK = (
    '"healthcheck":{"type":"","exec":null,"endpoint":"","response":{"type":"","value":""},'
    '"interval":0}'
)


def _wire(config: EnsembleConfig) -> str:
    """The ``msg`` of ``/dms/node/deployment/new``, as the DMS CLI would send it."""
    return NewDeploymentRequest(config).to_json().decode()


def _load(text: str, **options: Any) -> EnsembleConfig:
    return parse_ensemble_yaml(text, source="test.yaml", **options)


def _errors(text: str, **options: Any) -> list[str]:
    with pytest.raises(EnsembleYamlError) as caught:
        _load(text, **options)
    return [str(p) for p in caught.value.problems]


# --- the spec's and the DMS repository's examples ---------------------------------------

# dms-wire.md section 8, "minimal wire example" (with a real peer ID).
SPEC_MINIMAL_WIRE = (
    '{"Ensemble":{"v1":{"allocations":{"alloc1":{"executor":"docker","type":"task",'
    '"resources":{"cpu":{"cores":1},"ram":{"size":1073741824},"disk":{"size":1073741824}},'
    '"execution":{"type":"docker","params":{"image":"hello-world"}},"dns_name":"alloc1",'
    '"failure_recovery":"stay_down"}},'
    f'"nodes":{{"node1":{{"allocations":["alloc1"],"peer":"{PEER}","failure_recovery":"stay_down"}}}}}}}}}}'
)
SPEC_MINIMAL_YAML = f"""
allocations:
  alloc1:
    executor: docker
    type: task
    resources:
      cpu: {{cores: 1}}
      ram: {{size: 1}}
      disk: {{size: 1}}
    execution:
      type: docker
      image: hello-world
nodes:
  node1:
    allocations: [alloc1]
    peer: {PEER}
"""


def test_the_spec_minimal_example() -> None:
    config = _load(SPEC_MINIMAL_YAML)
    assert config == NewDeploymentRequest.from_json(SPEC_MINIMAL_WIRE).ensemble
    # The spec's example leaves out what Go always writes (structs, non-omitempty fields).
    assert _wire(config) == (
        '{"Ensemble":{"v1":{"escalation_strategy":"","allocations":{"alloc1":{"executor":"docker",'
        '"type":"task","resources":{"cpu":{"cores":1},"ram":{"size":1073741824},'
        '"disk":{"size":1073741824}},"execution":{"type":"docker","params":{"image":"hello-world"}},'
        f'"dns_name":"alloc1",{NO_HEALTHCHECK},"failure_recovery":"stay_down"}}}},'
        f'"nodes":{{"node1":{{"allocations":["alloc1"],"location":{{}},"peer":"{PEER}",'
        '"failure_recovery":"stay_down"}},"supervisor":{},"subnet":{}}}}'
    )


def test_the_hello_example() -> None:
    assert _wire(load_ensemble_yaml(DATA / "hello.yaml")) == (
        '{"Ensemble":{"v1":{"escalation_strategy":"","allocations":{"alloc1":{"executor":"docker",'
        '"type":"task","resources":{"cpu":{"cores":1},"ram":{"size":1073741824},'
        '"disk":{"size":1073741824}},"execution":{"type":"docker","params":{"image":"hello-world"}},'
        f'"dns_name":"alloc1",{NO_HEALTHCHECK},"failure_recovery":"stay_down"}}}},'
        '"nodes":{"node1":{"allocations":["alloc1"],"location":{},"failure_recovery":"stay_down"}},'
        '"supervisor":{},"subnet":{}}}}'
    )


def test_the_two_tasks_one_service_example() -> None:
    one_gib = '"resources":{"cpu":{"cores":1},"ram":{"size":1073741824},"disk":{"size":1073741824}}'

    def task(name: str, dns: str) -> str:
        return (
            f'"{name}":{{"executor":"docker","type":"task",{one_gib},'
            '"execution":{"type":"docker","params":{"args":["sh","-c",'
            f"\"echo '{name.replace('-', ' ').capitalize()}' \\u0026\\u0026 sleep 5\"],"
            f'"image":"busybox"}}}},"dns_name":"{dns}",{NO_HEALTHCHECK},'
            '"failure_recovery":"stay_down"}'
        )

    service = (
        f'"service-one":{{"executor":"docker","type":"service",{one_gib},'
        '"execution":{"type":"docker","params":{"image":"nginxdemos/hello:plain-text",'
        '"working_directory":"/"}},"dns_name":"serviceone","healthcheck":{"type":"command",'
        '"exec":["nginx","-t"],"endpoint":"","response":{"type":"string",'
        '"value":"nginx: the configuration file /etc/nginx/nginx.conf syntax is ok"},'
        '"interval":0},"failure_recovery":"stay_down"}'
    )
    nodes = (
        '"nodes":{"nodeA":{"allocations":["task-one"],"location":{},"failure_recovery":"stay_down"},'
        '"nodeB":{"allocations":["task-two"],"location":{},"failure_recovery":"stay_down"},'
        '"nodeC":{"allocations":["service-one"],"ports":[{"public":50010,"private":80,'
        '"allocation":"service-one"}],"location":{},"failure_recovery":"stay_down"}}'
    )
    assert _wire(load_ensemble_yaml(DATA / "two_tasks_one_service.yaml")) == (
        '{"Ensemble":{"v1":{"escalation_strategy":"","allocations":{'
        + ",".join([service, task("task-one", "taskone"), task("task-two", "tasktwo")])
        + "},"
        + nodes
        + ',"supervisor":{},"subnet":{}}}}'
    )


def test_every_feature() -> None:
    config = load_ensemble_yaml(DATA / "full.yaml", env={"DB_PASSWORD": "s3cret"})
    v1 = config.v1
    assert v1 is not None and v1.allocations is not None and v1.nodes is not None
    db, web = v1.allocations["db"], v1.allocations["web"]
    # resource sets: by name, and extended (shallowly, like the CLI) by a mapping naming one
    assert (db.resources.cpu.cores, db.resources.cpu.clock_speed) == (0.5, 2.4e9)
    assert (db.resources.ram.size, db.resources.disk.size) == (512 * MIB, 2 * 10**9)
    assert (web.resources.cpu.cores, web.resources.cpu.clock_speed) == (2.0, 0.0)
    assert web.resources.ram.size == 512 * MIB
    assert web.resources.gpus is not None and web.resources.gpus[0].vram == 24 * GIB
    # execution: flat YAML -> SpecConfig; environment mapping -> KEY=VALUE; placeholders
    assert db.execution.params == {
        "image": "postgres:16",
        "environment": ["POSTGRES_PASSWORD=s3cret", "POSTGRES_DB=app"],
        "restart_policy": "on-failure",
    }
    assert web.execution.params is not None
    assert web.execution.params["environment"] == ["MODE=production"]
    # durations, defaults, file contents
    assert (db.healthcheck.interval, web.healthcheck.interval) == (90 * 10**9, 10 * 10**9)
    assert (db.dns_name, web.dns_name, web.failure_recovery) == ("db", "www", "stay_down")
    public_key = (DATA / "keys" / "gateway.pub").read_text()
    assert v1.keys == {"gateway": public_key}
    assert web.keys is not None and web.keys[0].file == public_key
    assert v1.scripts == {"setup": (DATA / "scripts" / "setup.sh").read_bytes()}
    # edge_constraints -> edges; node defaults
    assert [(e.s, e.t, e.rtt, e.bw) for e in v1.edges or ()] == [("front", "spare", 50, 10**6)]
    assert (v1.nodes["spare"].failure_recovery, v1.nodes["front"].redundancy) == ("stay_down", 1)
    assert v1.subnet.join and v1.metadata == {"team": "platform"}
    assert v1.supervisor.children is not None
    assert v1.supervisor.children[0].allocations == ("db", "web")


def test_every_feature_on_the_wire() -> None:
    wire = _wire(load_ensemble_yaml(DATA / "full.yaml", env={"DB_PASSWORD": "s3cret"}))
    assert '"scripts":{"setup":"IyEvYmluL3NoCmFwdC1nZXQgdXBkYXRlCg=="}' in wire
    assert '"edges":[{"s":"front","t":"spare","rtt":50,"bw":1000000}]' in wire
    assert '"cpu":{"clock_speed":2400000000,"cores":0.5}' in wire
    assert (
        '"location":{"accept":[{"continent":"Europe","country":"DE"}]},"redundancy":1,'
        '"failure_recovery":"redeploy"'
    ) in wire
    assert EnsembleConfig.from_json(wire[len('{"Ensemble":') : -1]).to_json().decode() in wire


# --- conversions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (1, GIB),
        (1.5, 3 * GIB // 2),
        (0.1, 107374182),  # %.10f then truncation to whole bytes, as in the CLI
        ("512MiB", 512 * MIB),
        ("512 mib", 512 * MIB),
        ("2 GiB", 2 * GIB),
        ("1GB", 10**9),
        ("100KB", 100_000),
        ("4K", 4_000),
        ("4Ki", 4096),
        ("1e3MiB", 1000 * MIB),
        ("64B", 64),
    ],
)
def test_sizes_become_bytes(value: object, size: int) -> None:
    assert parse_bytes(value) == size


@pytest.mark.parametrize("value", ["-1", -1, "ten", "4 gigs", True, None, "1.", [1]])
def test_bad_sizes_are_refused(value: object) -> None:
    with pytest.raises(UnitError):
        parse_bytes(value)


@pytest.mark.parametrize(
    ("value", "hz"),
    [(2.4, 2.4e9), ("2400MHz", 2.4e9), ("3 GHz", 3e9), ("800kHz", 8e5), ("50Hz", 50.0), (3, 3e9)],
)
def test_clock_speeds_become_hertz(value: object, hz: float) -> None:
    assert parse_clock_hz(value) == hz


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2.4ghz", r"write the unit as GHz; the DMS reads the SI prefix case-sensitively"),
        ("2400mhz", r"write the unit as MHz"),
        ("2GB", r"unknown clock unit 'GB'"),
        ("fast", r"not a number"),
    ],
)
def test_clock_units_the_cli_would_misread_are_refused(value: str, message: str) -> None:
    with pytest.raises(UnitError, match=message):
        parse_clock_hz(value)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("30s", 30 * 10**9),
        ("1h30m", 5400 * 10**9),
        ("1.5s", 1_500_000_000),
        ("-2ms", -2_000_000),
        ("+300us", 300_000),
        ("1\u00b5s", 1_000),
        ("0", 0),
        (".5m", 30 * 10**9),
    ],
)
def test_go_durations(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("30", 'time: missing unit in duration "30"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("", 'time: invalid duration ""'),
        ("s", 'time: invalid duration "s"'),
        ("9999999999999h", 'time: invalid duration "9999999999999h"'),
    ],
)
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_go_duration(text)
    assert str(caught.value) == message


def test_a_shared_resource_set_is_converted_once_per_allocation() -> None:
    config = _load(
        """
resources:
  rc1: {cpu: {cores: 2}, ram: {size: 2}, disk: {size: 4}}
allocations:
  a1: {executor: docker, type: task, resources: rc1, execution: {type: docker, image: x}}
  a2: {executor: docker, type: task, resources: rc1, execution: {type: docker, image: y}}
nodes:
  n1: {allocations: [a1, a2]}
"""
    )
    assert config.v1 is not None and config.v1.allocations is not None
    sizes = [a.resources.ram.size for a in config.v1.allocations.values()]
    assert sizes == [2 * GIB, 2 * GIB]  # the CLI sends 2^61 for the second use


def test_yaml_scalars_are_read_as_yaml_v3_reads_them() -> None:
    config = _load(
        """
allocations:
  a:
    executor: docker
    type: task
    resources: {cpu: {cores: 1}, ram: {size: 0x10}, disk: {size: 1}}
    execution: {type: docker, image: x, flag: yes, date: 2024-01-01, octal: 017, ratio: 1:30}
nodes: {n: {allocations: [a]}}
"""
    )
    assert config.v1 is not None and config.v1.allocations is not None
    alloc = config.v1.allocations["a"]
    assert alloc.resources.ram.size == 16 * GIB
    assert alloc.execution.params == {
        "image": "x",
        "flag": "yes",
        "date": "2024-01-01",
        "octal": 15,
        "ratio": "1:30",
    }


def test_keys_match_case_insensitively_and_unknown_ones_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        config = _load(
            """
allocations:
  a:
    Executor: docker
    TYPE: task
    dnsname: typo
    resources: {cpu: {cores: 1}, ram: {size: 1}, disk: {size: 1}}
    execution: {type: docker, image: x}
Nodes: {n: {allocations: [a]}}
"""
        )
    assert config.v1 is not None and config.v1.allocations is not None
    assert config.v1.allocations["a"].executor == "docker"
    assert "allocations.a.dnsname is not an ensemble field and is ignored" in caplog.text


def test_placeholders(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("PEM")
    absolute = tmp_path / "abs.txt"
    absolute.write_text("ABS")
    config = _load(
        f"""
allocations:
  a:
    executor: docker
    type: task
    resources: {{cpu: {{cores: 1}}, ram: {{size: 1}}, disk: {{size: 1}}}}
    execution:
      type: docker
      image: ${{IMAGE}}
      environment: ["A=${{env:A:-a}}", "B=${{file:cert.pem}}", "C=${{file:{absolute}}}"]
nodes: {{n: {{allocations: [a]}}}}
""",
        base_dir=tmp_path,
        env={"IMAGE": "busybox:1.36"},
    )
    assert config.v1 is not None and config.v1.allocations is not None
    assert config.v1.allocations["a"].execution.params == {
        "image": "busybox:1.36",
        "environment": ["A=a", "B=PEM", "C=ABS"],
    }


# --- errors name the file, the YAML path and the problem --------------------------------

VALID = """
allocations:
  a:
    executor: docker
    type: task
    resources: {cpu: {cores: 1}, ram: {size: 1}, disk: {size: 1}}
    execution: {type: docker, image: x}
nodes: {n: {allocations: [a]}}
"""


def test_yaml_syntax_errors_name_line_and_column() -> None:
    with pytest.raises(
        EnsembleYamlError, match=r"test.yaml: YAML error at line 3, column 6: expected ',' or '\]'"
    ):
        _load("allocations:\n  a: [1, 2\nnodes: {}\n")


def test_duplicate_keys_are_errors() -> None:
    with pytest.raises(EnsembleYamlError, match=r"mapping key 'nodes' already defined at line 1"):
        _load("nodes: {}\nnodes: {}\n")


def test_a_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(EnsembleYamlError, match=f"^no such file: {tmp_path / 'nope.yaml'}$"):
        load_ensemble_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must be a YAML mapping, not empty"),
        ("- a\n- b\n", "must be a YAML mapping, not a list"),
    ],
)
def test_the_top_level_must_be_a_mapping(text: str, message: str) -> None:
    with pytest.raises(EnsembleYamlError, match=f"^test.yaml: {message}$"):
        _load(text)


def test_missing_placeholder_sources_are_named(tmp_path: Path) -> None:
    text = VALID + "scripts:\n  setup: ${file:nope.sh}\nkeys:\n  k: ${env:NO_SUCH_VAR}\n"
    assert _errors(text, base_dir=tmp_path, env={}) == [
        f"scripts.setup: cannot resolve ${{file:nope.sh}}: "
        f"file {tmp_path / 'nope.sh'} does not exist",
        "keys.k: cannot resolve ${env:NO_SUCH_VAR}: environment variable NO_SUCH_VAR is not set",
    ]
    assert _errors(VALID + "keys:\n  k: ${vault:x}\n", env={}) == [
        "keys.k: unknown source 'vault' in ${vault:x} (use env or file)"
    ]
    assert _errors(VALID + "keys:\n  k: ${LOOP}\n", env={"LOOP": "${LOOP}"}) == [
        "keys.k: placeholders keep expanding into placeholders"
    ]


def test_conversion_and_type_errors_name_their_paths() -> None:
    text = """
allocations:
  a:
    executor: docker
    type: [task]
    resources: {cpu: {cores: lots, clock_speed: 2.4ghz}, ram: {size: "4 gigs"}, disk: {size: 1}}
    execution: {type: docker, image: x}
    healthcheck: {type: command, exec: [true], interval: 30}
  b:
    executor: docker
    type: task
    resources: medium
    execution: {type: docker, image: x}
nodes: {n: {allocations: [a, b], redundancy: 1.5}}
edge_constraints: [{edges: [n]}]
"""
    assert _errors(text) == [
        "allocations.a.resources.cpu.cores: 'lots' is not a number",
        "allocations.a.resources.cpu.clock_speed: '2.4ghz': write the unit as GHz; the DMS reads "
        "the SI prefix case-sensitively and would take 'ghz' as 1 Hz per unit",
        "allocations.a.resources.ram.size: '4 gigs': unknown size unit 'gigs' (use B, KiB, MiB, "
        "GiB, \u2026)",
        'allocations.a.healthcheck.interval: must be a duration such as "30s"',
        "allocations.b.resources: no resource set named 'medium' (defined: none are defined)",
        "edge_constraints[0].edges: must be a pair of node names",
        "allocations.a.type: must be a string, not a list",
        "allocations.a.healthcheck.exec[0]: must be a string, not a boolean",
        "nodes.n.redundancy: must be a whole number, not number 1.5",
    ]


def test_values_given_empty_are_refused() -> None:
    text = VALID.replace("image: x}", 'image: x, working_directory: ""}') + "subnet: {}\n"
    text = text.replace("type: task", 'type: task\n    dns_name: ""')
    text = text.replace(
        "execution:", "healthcheck: {type: command, exec: [a], interval: 0s}\n    execution:"
    )
    assert _errors(text) == [
        "allocations.a.healthcheck.interval: must be greater than 0",
        "allocations.a.dns_name: must not be empty if given",
        "allocations.a.execution.params.working_directory: must not be empty if given",
        "subnet.join: must be given as true or false when subnet is given",
    ]


def test_validation_problems_carry_the_source() -> None:
    text = VALID.replace("cores: 1", "cores: 0").replace("[a]", "[a, ghost]")
    with pytest.raises(EnsembleYamlError) as caught:
        _load(text)
    assert str(caught.value) == (
        "test.yaml: 2 problems:\n"
        "  allocations.a.resources.cpu.cores: must be > 0\n"
        "  nodes.n.allocations[1]: allocation 'ghost' is not defined"
    )
