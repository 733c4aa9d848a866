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


def test_a_file_of_known_keys_loads_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    # "name" picks a resource set; the DMS drops it when decoding, and so do we, silently.
    with caplog.at_level(logging.WARNING):
        load_ensemble_yaml(DATA / "full.yaml", env={"DB_PASSWORD": "s3cret"})
    assert caplog.text == ""


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


# --- keys: the DMS's checks read exact keys, its decoding folds them ---------------------

ONE_ALLOCATION = """
allocations:
  a:
    executor: docker
    type: task
    resources: {cpu: {cores: 1}, ram: {size: 1}, disk: {size: 1}}
    execution: {type: docker, image: x}
nodes: {n: {allocations: [a]}}
"""


@pytest.mark.parametrize(
    ("old", "new", "problems"),
    [
        (
            "executor:",
            "Executor:",
            [
                "allocations.a: allocation must have an executor "
                "(found 'Executor': the DMS reads the key 'executor', lowercase)"
            ],
        ),
        ("nodes:", "Nodes:", ["Nodes.n: failure_recovery must be specified for node"]),
        (
            "type: task",
            "TYPE: task",
            ["allocations.a: allocation must have a type (service or task)"],
        ),
        (
            "{type: docker,",
            "{Type: docker,",
            [
                "allocations.a: execution must have a type",
                "allocations.a.execution: execution must have a type",
            ],
        ),
        ("{cores: 1}", "{Cores: 1}", ["allocations.a.resources: cpu must have cores value"]),
        (
            "allocations:\n  a:",
            "Allocations:\n  a:",
            [
                "at least one allocation must be defined",
                "Allocations.a: failure_recovery must be specified for allocation",
                "nodes.n: allocations must be defined when node is defined",
            ],
        ),
    ],
)
def test_keys_the_dms_checks_are_refused_in_another_case_as_the_dms_refuses_them(
    old: str, new: str, problems: list[str]
) -> None:
    assert ONE_ALLOCATION.count(old) == 1
    assert _errors(ONE_ALLOCATION.replace(old, new)) == problems


def test_other_keys_match_case_insensitively_and_unknown_ones_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = ONE_ALLOCATION.replace("type: task", "type: task\n    dnsname: typo\n    Depends_On: []")
    text = text.replace("[a]}", f"[a], Peer: {PEER}, Redundancy: 2}}")
    with caplog.at_level(logging.WARNING):
        config = _load(text)
    assert config.v1 is not None and config.v1.nodes is not None
    assert config.v1.allocations is not None
    assert config.v1.allocations["a"].depends_on == ()
    node = config.v1.nodes["n"]
    # The DMS sets the default under the exact key, and its decoding prefers an exact match.
    assert (node.peer, node.redundancy) == (PEER, 0)
    assert "allocations.a.dnsname is not an ensemble field and is ignored" in caplog.text
    assert "nodes.n.Redundancy is ignored: the DMS uses redundancy" in caplog.text


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


def test_a_long_value_in_a_message_is_cut_short() -> None:
    """A 3 MB string at the top level was echoed whole in the one-line error."""
    with pytest.raises(EnsembleYamlError) as caught:
        _load("a" * 100_000 + "\n")
    assert str(caught.value) == (
        "test.yaml: must be a YAML mapping, not string 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "…' (100000 characters)"
    )


def test_an_anchor_that_contains_itself_is_refused_as_yaml_v3_refuses_it() -> None:
    """PyYAML builds the cycle, and walking it raised a RecursionError traceback."""
    with pytest.raises(
        EnsembleYamlError,
        match=r"^test.yaml: YAML error at line 2, column 22: anchor 'a' value contains itself$",
    ):
        _load("nodes: {}\nallocations: &a {x: [*a]}\n")


def test_excessive_aliasing_is_refused_as_yaml_v3_refuses_it() -> None:
    """A "billion laughs" file of a few hundred bytes took 45 s and 300 MB to expand; yaml.v3
    counts the nodes it decodes under an alias and gives up past its ratio."""
    laughs = ["a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    with pytest.raises(
        EnsembleYamlError, match=r"^test.yaml: YAML error: document contains excessive aliasing$"
    ):
        _load("\n".join(laughs) + "\n")


def test_a_few_aliases_are_expanded() -> None:
    resources = "{cpu: {cores: 1}, ram: {size: 1}, disk: {size: 1}}"
    text = (
        f"allocations:\n  a:\n    executor: docker\n    type: task\n"
        f"    resources: &r {resources}\n    execution: {{type: docker, image: x}}\n"
        f"  b:\n    executor: docker\n    type: task\n    resources: *r\n"
        f"    execution: {{type: docker, image: x}}\n"
        f"nodes: {{n: {{allocations: [a, b]}}}}\n"
    )
    config = _load(text).v1
    assert config is not None
    assert config.allocations["a"].resources == config.allocations["b"].resources


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


def test_every_transform_problem_is_named_and_stops_the_checks() -> None:
    text = """
allocations:
  a:
    Executor: docker
    type: task
    resources: {cpu: {cores: 1, clock_speed: 2.4ghz}, ram: {size: "4 gigs"}, disk: {size: 1}}
    execution: {type: docker, image: x, environment: null}
    healthcheck: {type: command, exec: [true], interval: 30}
  b:
    executor: docker
    type: task
    resources: medium
    execution: [docker]
nodes: {n: {allocations: [a, b]}}
edge_constraints: [{edges: [n]}]
"""
    # The DMS stops at its first failing step: no check runs (Executor: is not reported).
    assert _errors(text) == [
        "allocations.a.execution.environment: invalid environment configuration: must be a list "
        "or a mapping, not null",
        "allocations.b.resources: no resource set named 'medium' (defined: none are defined)",
        "allocations.a.resources.cpu.clock_speed: '2.4ghz': write the unit as GHz; the DMS reads "
        "the SI prefix case-sensitively and would take 'ghz' as 1 Hz per unit",
        "allocations.a.resources.ram.size: '4 gigs': unknown size unit 'gigs' (use B, KiB, MiB, "
        "GiB, \u2026)",
        'allocations.a.healthcheck.interval: must be a duration such as "30s"',
        "allocations.b.execution: invalid execution configuration: must be a mapping, not a list",
        "edge_constraints[0]: invalid edges parameter: must be a pair of node names",
    ]


def test_every_check_problem_is_named_with_the_dms_reason() -> None:
    text = """
allocations:
  a:
    executor: docker
    type: task
    resources: {cpu: {cores: lots}, ram: {size: 1}, disk: {size: 1}}
    execution: {type: docker, image: x, restart_policy: sometimes}
    depends_on: [a]
  b:
    executor: firecracker
    type: task
    resources: {cpu: {cores: 1}, ram: {size: 1}, disk: {size: 1}}
    execution: {type: docker, image: x}
nodes: {n: {allocations: [a, b], redundancy: 1.5, ports: [{private: 80}]}}
"""
    # One problem per check, as each DMS check stops at its first (the node's ports are fine
    # for it until its redundancy is).
    assert _errors(text) == [
        "cyclic dependencies detected in allocations",
        "allocations.a: depends_on must not refer to itself",
        "allocations.a.resources: cpu cores must be a valid number",
        "allocations.a.execution: invalid docker restart_policy: sometimes",
        "allocations.b: allocation executor type (firecracker) must match execution type (docker)",
        "nodes.n: redundancy must be a number",
    ]


def test_decoding_problems_name_their_paths() -> None:
    text = ONE_ALLOCATION.replace(
        "execution:", "healthcheck: {type: command, exec: [true]}\n    execution:"
    )
    text += "keys: {k: 1}\nmetadata: [x]\nedge_constraints: [{edges: [n, m], rtt: 1.5}]\n"
    text = text.replace("nodes: {n: {allocations: [a]}}", "nodes: {n: {allocations: [a]}, m: {}}")
    assert _errors(text) == [
        "allocations.a.healthcheck.exec[0]: must be a string, not boolean true",
        "keys.k: must be a string, not number 1",
        "metadata: must be a mapping, not a list",
        "edges[0].rtt: must be a whole number >= 0, not number 1.5",
    ]


def test_values_given_empty_are_refused() -> None:
    text = VALID.replace("image: x}", 'image: x, working_directory: ""}') + "subnet: {}\n"
    text = text.replace("type: task", 'type: task\n    dns_name: ""')
    text = text.replace(
        "execution:", "healthcheck: {type: command, exec: [a], interval: 0s}\n    execution:"
    )
    assert _errors(text) == [
        "allocations.a: dns_name cannot be empty if specified",
        "allocations.a.healthcheck: healthcheck interval must be greater than 0",
        "allocations.a.execution: docker working directory cannot be empty if specified",
        "subnet: subnet can not be empty if specified",
    ]


def test_validation_problems_carry_the_source() -> None:
    text = VALID.replace("cores: 1", "cores: 0").replace("[a]", "[a, ghost]")
    with pytest.raises(EnsembleYamlError) as caught:
        _load(text)
    assert str(caught.value) == (
        "test.yaml: 2 problems:\n"
        "  allocations.a.resources: cpu cores must be positive\n"
        "  nodes.n: referenced allocation 'ghost' not found"
    )


def test_the_gateways_own_checks_run_last() -> None:
    # Passes the DMS's checks; the DMS would only find out while deploying.
    text = ONE_ALLOCATION.replace("type: task", "type: job")
    assert _errors(text) == ["allocations.a.type: 'job' is not one of service, task"]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "executor: docker",
            "executor: containerd",
            "allocations.a: allocation executor type (containerd) must match execution type "
            "(docker)",
        ),
        (
            "    execution:",
            "    volume: [{type: glusterfs, servers: [s1], mount_destination: /data}]\n"
            "    execution:",
            "allocations.a.volume: glusterfs type volume must define one or more servers",
        ),
    ],
)
def test_what_the_dms_cannot_load_is_refused_as_it_refuses_it(
    old: str, new: str, problem: str
) -> None:
    assert _errors(ONE_ALLOCATION.replace(old, new)) == [problem]


def test_a_containerd_execution_is_unsupported_by_the_dms_loader() -> None:
    text = ONE_ALLOCATION.replace("executor: docker", "executor: containerd").replace(
        "{type: docker,", "{type: containerd,"
    )
    assert _errors(text) == ["allocations.a.execution: unsupported execution type: containerd"]


# --- the ensembles NuNet ships ------------------------------------------------------------

APPLIANCE = DATA / "appliance"


def test_the_appliance_ensembles_load_as_the_dms_loads_them() -> None:
    loaded = {p.stem: load_ensemble_yaml(p) for p in sorted(APPLIANCE.glob("*.yaml"))}
    assert sorted(loaded) == [
        "hello_world",
        "relay_service",
        "task_with_contract",
        "two_services_gpu",
        "web_ui_gpu",
    ]
    for config in loaded.values():
        assert config.v1 is not None and config.v1.allocations is not None
        for name, alloc in config.v1.allocations.items():
            assert (alloc.dns_name, alloc.failure_recovery) == (name, "stay_down")


def test_the_appliance_hello_world() -> None:
    wire = _wire(load_ensemble_yaml(APPLIANCE / "hello_world.yaml"))
    assert wire == (
        '{"Ensemble":{"v1":{"escalation_strategy":"","allocations":{"alloc1":{"executor":"docker",'
        '"type":"task","resources":{"cpu":{"cores":1},"ram":{"size":1073741824},'
        '"disk":{"size":1073741824}},"execution":{"type":"docker","params":{"image":"hello-world"}},'
        f'"dns_name":"alloc1",{NO_HEALTHCHECK},"failure_recovery":"stay_down"}}}},'
        f'"nodes":{{"node1":{{"allocations":["alloc1"],"location":{{}},"peer":"{PEER}",'
        '"failure_recovery":"stay_down"}},"supervisor":{},"subnet":{}}}}'
    )


def test_the_appliance_services_with_gpus_volumes_and_ports() -> None:
    config = load_ensemble_yaml(APPLIANCE / "two_services_gpu.yaml")
    assert config.v1 is not None and config.v1.allocations is not None
    assert config.v1.nodes is not None
    model, flows = config.v1.allocations["model"], config.v1.allocations["flows"]
    assert model.resources.gpus is not None and model.resources.gpus[0].vendor == "NVIDIA"
    assert (model.resources.ram.size, model.resources.disk.size) == (16 * GIB, 40 * GIB)
    assert model.volume is not None
    assert (model.volume[0].src, model.volume[0].mount_destination) == (
        "/srv/volumes/model",
        "/root/.model",
    )
    assert flows.execution.params is not None
    assert flows.execution.params["environment"][0] == "MODEL_HOST=http://model.internal:11434"
    ports = config.v1.nodes["big-node"].ports or ()
    assert [(p.public, p.private, p.allocation) for p in ports] == [
        (31434, 11434, "model"),
        (35678, 5678, "flows"),
    ]


def test_the_appliance_keys_the_dms_does_not_know_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        relay = load_ensemble_yaml(APPLIANCE / "relay_service.yaml")
    assert relay.v1 is not None and relay.v1.allocations is not None
    assert relay.v1.allocations["alloc1"].dns_name == "alloc1"  # dnsname is no field
    for key in ("dnsname", "forwardStdout", "stdoutLabels", "stdoutPrefix"):
        assert f"allocations.alloc1.{key} is not an ensemble field" in caplog.text
    web = load_ensemble_yaml(APPLIANCE / "web_ui_gpu.yaml")
    assert web.v1 is not None and web.v1.allocations is not None and web.v1.nodes is not None
    params = web.v1.allocations["alloc1"].execution.params or {}
    assert params["volumes"][0] == {"source": "models", "target": "/root/.models"}
    assert web.v1.nodes["node1"].peer == "<peer id goes here>"
    contract = load_ensemble_yaml(APPLIANCE / "task_with_contract.yaml")
    assert contract.v1 is not None and contract.v1.contracts is not None
    assert contract.v1.contracts["contract1"].host.startswith("did:key:z6Mkh")


def test_a_dotted_allocation_name_escapes_the_dms_steps_as_in_the_dms(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The DMS's paths join keys with dots, so "allocations.web.app.execution" has one part too
    # many for its patterns: the allocation is neither transformed nor checked there (its
    # flat execution is not wrapped, so the image is dropped). The gateway's own checks catch it.
    text = ONE_ALLOCATION.replace("  a:", "  web.app:").replace("[a]", "[web.app]")
    with caplog.at_level(logging.WARNING):
        problems = _errors(text)
    assert problems == ["allocations.web.app.execution.params.image: required"]
    assert "allocations.web.app.execution.image is not an ensemble field" in caplog.text
