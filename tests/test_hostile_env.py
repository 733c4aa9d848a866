"""A pod's hostile environment through every script the gateway writes, run as the devnet
runs them.

A pod declares any environment it likes: ``PATH`` before the system's, ``LD_PRELOAD`` and its
family, ``IFS``, ``BASH_ENV``, ``ENV``, values with newlines and shell syntax. The pod is
translated (its provision script, its init container's and its own wrapper, with a probe and
hooks), the allocations are planned as the devnet plans them, and each one's set-up runs as
the devnet starts it — in the devnet's fixed environment, the pod's applied by ``env -i`` at
the end. Whatever the environment: the translation refuses it naming the field, or every
script runs to its end, the container's start and exit status are reported as they were, and
nothing in the environment runs as a command.
"""

from __future__ import annotations

import ipaddress
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmsgw.behaviors.ensemble import EnsembleConfig
from dmsgw.behaviors.ensemble_validation import validate_ensemble
from dmsgw.devnet.protocol import AllocationDeploymentConfig
from dmsgw.devnet.sandbox import Isolation, SandboxPlan, materialise, plan_sandbox
from dmsgw.devnet.tools import SETUP_ENVIRONMENT
from dmsgw.interlink.translate import PodTranslationError, pod_to_ensemble
from dmsgw.interlink.translate.run_markers import Marker, markers, strip_marker
from tests.support.pod_bodies import cm, container, data, make_pod, needs_sh

CANARY = "dmsgw-canary"
"""What an environment value that ran as a command would create in the working directory."""
NAMES = st.one_of(
    st.sampled_from(
        [
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "IFS",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "PS4",
            "CDPATH",
            "HOME",
            "A\nB",
            "A B",
            "my.var",
        ]
    ),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00="), min_size=1, max_size=8),
)
VALUES = st.one_of(
    st.sampled_from(
        [
            f"$(touch {CANARY})",
            f"`touch {CANARY}`",
            f"; touch {CANARY}",
            f"x\ntouch {CANARY}\n",
            f"/nonexistent:{SETUP_ENVIRONMENT['PATH']}",
            "/nonexistent/lib.so",
            "/",
            " \t\n",
            "'\"\\",
            "",
        ]
    ),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12),
)
ENVIRONMENTS = st.lists(
    st.fixed_dictionaries({"name": NAMES, "value": VALUES}),
    max_size=4,
    unique_by=lambda e: e["name"],
)


def _pod(env: list[dict[str, str]]) -> dict[str, Any]:
    """A pod with every script the gateway writes: a ConfigMap file (the provision script),
    an init container, and a main container with a probe and hooks, all in ``env``."""
    hooks = {
        "postStart": {"exec": {"command": ["/bin/sh", "-c", "true"]}},
        "preStop": {"exec": {"command": ["/bin/sh", "-c", "true"]}},
    }
    main = container(
        command=["/bin/sh", "-c", "echo out; exit 3"],
        env=env,
        lifecycle=hooks,
        livenessProbe={"exec": {"command": ["/bin/sh", "-c", "true"]}, "periodSeconds": 1},
        volumeMounts=[{"name": "conf", "mountPath": "/etc/app"}],
    )
    init = container("init", command=["/bin/sh", "-c", "echo ready"], env=env)
    volumes = [{"name": "conf", "configMap": {"name": "cm"}}]
    return make_pod(main, initContainers=[init], volumes=volumes)


def _deployment_config(config: EnsembleConfig, name: str) -> AllocationDeploymentConfig:
    """What the devnet's orchestrator hands a node for allocation ``name``."""
    assert config.v1 is not None and config.v1.allocations is not None
    a = config.v1.allocations[name]
    scripts = config.v1.scripts or {}
    return AllocationDeploymentConfig(
        type=a.type,
        executor=a.executor,
        resources=a.resources,
        execution=a.execution,
        provision_scripts={s: scripts[s] for s in a.provision or () if s in scripts} or None,
        keys=a.keys,
        volume=a.volume,
        healthcheck=a.healthcheck,
    )


def _run(plan: SandboxPlan) -> subprocess.CompletedProcess[bytes]:
    """The allocation's set-up and command, started as the devnet's executor starts them."""
    materialise(plan)
    return subprocess.run(
        plan.argv(),
        env=dict(SETUP_ENVIRONMENT),
        cwd=plan.root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )


@needs_sh
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(env=ENVIRONMENTS)
def test_a_hostile_environment_runs_no_command_and_changes_no_report(
    env: list[dict[str, str]],
) -> None:
    try:
        config = pod_to_ensemble(data(_pod(env), config_maps=[cm("cm", {"a.conf": "x"})]))
    except PodTranslationError as exc:
        assert str(exc).startswith("spec.") and ".env[" in str(exc), str(exc)
        return
    assert validate_ensemble(config) == ()
    with tempfile.TemporaryDirectory(prefix="dmsgw-env-") as where:
        root = Path(where)
        plans = [
            plan_sandbox(
                root / name,
                _deployment_config(config, name),
                Isolation.REWRITE,
                volumes=root / "volumes",
            )
            for name in ("init", "main")
        ]
        init, main = (_run(plan) for plan in plans)
        assert init.returncode == 0, init.stderr
        shown = b"".join(strip_marker(line) for line in main.stdout.splitlines(keepends=True))
        assert (main.returncode, shown) == (3, b"out\n"), main.stderr
        assert list(markers(main.stderr)) == [Marker(None), Marker(3)], main.stderr
        assert not list(root.rglob(CANARY))


ADDRESSES = [None, None, None, "10.1.2.3", " ::1 "]
"""``interlink.eu/pod-ip`` absent or an address, mostly: most hostile values are refused."""
ANNOTATION_TEXT = st.one_of(
    VALUES,
    st.sampled_from(["'", '"', "\\", "EOF\n", "cat <<'X'\n", "$(", "`", "&", "\n)"]),
    st.text(st.characters(codec="utf-8"), max_size=24),
)


@needs_sh
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ANNOTATION_TEXT, pod_ip=st.one_of(st.sampled_from(ADDRESSES), VALUES))
def test_hostile_annotations_reach_the_tunnels_shell_verbatim_or_are_refused(
    text: str, pod_ip: str | None
) -> None:
    """interLink's annotations are the pod's own text: the tunnel's commands reach the shell
    that runs them as its script, byte for byte, in one quoted word of the wrapper (the
    shell's first line records its arguments and exits, so the hostile rest is never even
    read); ``interlink.eu/pod-ip`` is an address or refused; the wrapper's report stays as it
    was (the tunnel ended, so the command was stopped); nothing else runs."""
    with tempfile.TemporaryDirectory(prefix="dmsgw-tunnel-") as where:
        root = Path(where)
        saw = root / "tunnel-argv"
        commands = f"cat /proc/$$/cmdline > {saw}; exit 0\n{text}"
        main = container(command=["/bin/sh", "-c", "exec sleep 30"])
        spec = make_pod(main, terminationGracePeriodSeconds=1)
        spec["metadata"]["annotations"] = {"interlink.eu/wstunnel-client-commands": commands}
        if pod_ip is not None:
            spec["metadata"]["annotations"]["interlink.eu/pod-ip"] = pod_ip
        try:
            config = pod_to_ensemble(data(spec))
        except PodTranslationError as exc:
            assert str(exc).startswith('metadata.annotations["interlink.eu/'), str(exc)
            assert "\x00" in commands or 'pod-ip"]' in str(exc), str(exc)
            return
        allocation = _deployment_config(config, "main")
        if pod_ip is not None:
            address = str(ipaddress.ip_address(pod_ip.strip()))
            assert f"POD_IP={address}" in allocation.execution.params["environment"]
        plan = plan_sandbox(root / "main", allocation, Isolation.REWRITE, volumes=root)
        done = _run(plan)
        argv = saw.read_bytes().split(b"\x00")
        assert argv[:2] == [b"/bin/sh", b"-c"] and argv[3:] == [b"dmsgw-tunnel", b""]
        assert argv[2].startswith(commands.encode() + b"\ndmsgw_rc=$?"), argv
        assert done.returncode == 143, done.stderr
        assert list(markers(done.stderr)) == [Marker(None), Marker(143)], done.stderr
        assert not list(root.rglob(CANARY))
