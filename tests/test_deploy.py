"""What operators deploy (``deploy/``): interLink chart values that the chart and the gateway
both accept, a systemd unit that systemd verifies, alert rules that Prometheus checks and
that fire when they should, a ServiceMonitor that scrapes the port the values open."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmsgw.interlink.configuration.serve_config import GatewayConfig, load_config
from tests.support.deploy_files import DEPLOY

TIMEOUT_S = 120

CHART_PLUGIN_KEYS = {
    "enabled", "image", "command", "args", "config", "envs", "socket", "address", "port",
    "privileged", "resources", "extraVolumeMounts",
}  # fmt: skip
"""The `plugin:` block of interLink's chart (interlink-hq/interlink-helm-chart, values.yaml and
templates/virtual-kubelet.yaml at 45fb2fa): the keys its templates read."""

CHART_RESOURCES = {"CPU": {"request", "limit"}, "memory": {"request", "limit"}}
"""The shape the chart's `interlink.containerResources` helper reads."""

CHART_CONFIG_PATH = "/etc/interlink/plugin.yaml"
"""Where the chart mounts `plugin.config` in the plugin container."""


def _values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((DEPLOY / "helm" / "dmsgw-values.yaml").read_text())
    return values


def _plugin_config(tmp_path: Path) -> tuple[GatewayConfig, Path]:
    """The values' gateway configuration as the gateway loads it, and the DMS log directory
    it names (checked readable at load: here a directory of the test stands in for it)."""
    text = _values()["plugin"]["config"]
    named = Path(yaml.safe_load(text)["dms_log_dir"])
    (tmp_path / "logs").mkdir()
    config_file = tmp_path / "plugin.yaml"
    config_file.write_text(text.replace(f"dms_log_dir: {named}", f"dms_log_dir: {tmp_path}/logs"))
    secrets = {"DMSGW_OPERATOR_TOKEN": "from-the-secret"}  # the values' envs give it
    return load_config(config_file=config_file, env=secrets), named


def test_the_helm_values_use_only_what_the_chart_reads() -> None:
    values = _values()
    plugin = values["plugin"]
    assert set(plugin) <= CHART_PLUGIN_KEYS, set(plugin) - CHART_PLUGIN_KEYS
    assert plugin["enabled"] is True and plugin["command"] == ["dmsgw"]
    assert plugin["args"] == ["serve", "--config", CHART_CONFIG_PATH]
    assert {k: set(v) for k, v in plugin["resources"].items()} == CHART_RESOURCES
    assert values["interlink"]["socket"].startswith("unix:///var/run/")  # the chart's `sockets`
    volumes = {volume["name"] for volume in values["extraVolumes"]}
    mounts = {mount["name"] for mount in plugin["extraVolumeMounts"]}
    assert mounts == volumes


def test_the_helm_values_config_is_one_the_gateway_loads(tmp_path: Path) -> None:
    plugin = _values()["plugin"]
    config, log_dir = _plugin_config(tmp_path)
    assert config.listen.path is not None
    assert plugin["socket"] == f"unix://{config.listen.path}"  # interLink calls where it listens
    assert config.listen.path.parent == Path("/var/run")  # inside the chart's `sockets` volume
    mounted = {Path(m["mountPath"]) for m in plugin["extraVolumeMounts"]}
    for needed in (config.key_dir, config.cap_dir, config.state_path.parent, log_dir):
        assert needed in mounted, f"{needed} is not on a mounted volume"
    host_logs = next(v for v in _values()["extraVolumes"] if "hostPath" in v)
    assert Path(host_logs["hostPath"]["path"]) == log_dir  # the DMS's own path
    secrets = {e["name"] for e in plugin["envs"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert secrets == {"DMS_PASSPHRASE", "DMSGW_OPERATOR_TOKEN"}


def test_the_servicemonitor_scrapes_the_port_the_values_open(tmp_path: Path) -> None:
    service, monitor = yaml.safe_load_all(
        (DEPLOY / "prometheus" / "servicemonitor.yaml").read_text()
    )
    values = _values()
    operator = _plugin_config(tmp_path)[0].operator_listen
    assert service["spec"]["selector"] == {"app": values["nodeName"]}  # the chart's pod label
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == operator.port and operator.host == "0.0.0.0"
    assert monitor["kind"] == "ServiceMonitor"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == (port["name"], "/metrics")
    token = next(e for e in values["plugin"]["envs"] if e["name"] == "DMSGW_OPERATOR_TOKEN")
    assert endpoint["bearerTokenSecret"] == token["valueFrom"]["secretKeyRef"]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (`make test` installs it as root)")
    return found


def test_the_systemd_unit_verifies_and_is_hardened(tmp_path: Path) -> None:
    tool = _tool("systemd-analyze")
    text = (DEPLOY / "systemd" / "dmsgw.service").read_text()
    dmsgw = Path(sys.executable).parent / "dmsgw"
    unit = tmp_path / "dmsgw.service"
    unit.write_text(text.replace("/opt/dmsgw/bin/dmsgw", str(dmsgw)))
    done = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert (done.returncode, done.stderr) == (0, "")
    settings = {line.partition("=")[0] for line in text.splitlines() if "=" in line}
    hardening = {
        "User", "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp",
        "CapabilityBoundingSet", "RestrictAddressFamilies", "SystemCallFilter", "StateDirectory",
        "RuntimeDirectory", "Restart",
    }  # fmt: skip
    assert hardening <= settings, hardening - settings
    assert "ExecStart=/opt/dmsgw/bin/dmsgw serve --config /etc/dmsgw/dmsgw.yaml" in text


def test_a_broken_unit_fails_the_same_check(tmp_path: Path) -> None:
    tool = _tool("systemd-analyze")
    unit = tmp_path / "dmsgw.service"
    unit.write_text((DEPLOY / "systemd" / "dmsgw.service").read_text())  # /opt/dmsgw is absent
    done = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode != 0 or done.stderr


def test_the_alert_rules_check_and_fire_as_their_tests_say() -> None:
    tool = _tool("promtool")
    rules = DEPLOY / "prometheus"
    for command in (
        ["check", "rules", "dmsgw-alerts.yaml"],
        ["test", "rules", "dmsgw-alerts.test.yaml"],
    ):
        done = subprocess.run(
            [tool, *command], cwd=rules, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert done.returncode == 0, done.stdout + done.stderr
