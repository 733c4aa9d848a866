"""The deployment files of ``deploy/`` as the tests read them: where they are, and the series
the alert rules query (which the end-to-end usage test checks the gateway exports)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent.parent
DEPLOY = REPO / "deploy"


def alert_metrics() -> set[str]:
    """Every gateway series the alert rules query (the end-to-end test checks each is
    exported)."""
    groups = yaml.safe_load((DEPLOY / "prometheus" / "dmsgw-alerts.yaml").read_text())["groups"]
    exprs = [str(rule["expr"]) for group in groups for rule in group["rules"]]
    return {name for expr in exprs for name in re.findall(r"\bdmsgw_[a-z0-9_]+", expr)}
