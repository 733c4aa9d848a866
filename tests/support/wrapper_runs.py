"""Running a container's pod wrapper as the DMS would, on this machine: what the tests of the
wrapper's probes, hooks and interLink's network annotations observe."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from dmsgw.interlink.translate.inputs import Container
from dmsgw.interlink.translate.pod_network import NO_NETWORK, PodNetwork
from dmsgw.interlink.translate.probes import probe_runs
from dmsgw.interlink.translate.wrapper import Hooks, wrapper_script
from dmsgw.interlink.wire import k8s

RUN_TIMEOUT_S = 30


def run_wrapper(
    tmp_path: Path,
    spec: dict[str, Any],
    command: str,
    *,
    pre_stop: str = "",
    network: PodNetwork = NO_NETWORK,
    grace_s: int = 1,
    env: dict[str, str] | None = None,
) -> Any:
    """Run the wrapper of the container ``spec`` (its grace period ``grace_s``) around
    ``sh -c command`` in ``tmp_path``, with the pod's ``network`` annotations (and ``env``,
    else this process's environment)."""
    container = Container("spec.containers[0]", k8s.Container.model_validate(spec), None)
    hooks = Hooks(pre_stop=pre_stop)
    script = wrapper_script(container, hooks, "", probe_runs(container), grace_s, network)
    return subprocess.run(
        ["/bin/sh", "-c", script, "dmsgw-pod", "/bin/sh", "-c", command],
        cwd=tmp_path,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        env=env,
    )
