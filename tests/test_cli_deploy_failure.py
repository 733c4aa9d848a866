"""What ``deploy --wait`` says of a failed deployment: everything the DMS's replies tell, and
what they do not (decision 117)."""

from __future__ import annotations

import io

from dmsgw.behaviors.status import DeploymentStatus
from dmsgw.cli.client_commands import Progress

IN_ITS_LOG = ": the DMS tells the cause only in its own log, on its host"


def _progress(status: DeploymentStatus, **allocations: str) -> Progress:
    progress = Progress("e1", io.StringIO(), status=status)
    progress.allocations.update({k.replace("_", "."): v for k, v in allocations.items()})
    return progress


def test_a_failed_deployment_names_each_allocation_as_the_dms_last_showed_it() -> None:
    progress = _progress(DeploymentStatus.FAILED, n1_db="failed", n1_web="running (healthy)")
    progress.types.update({"n1.db": "service", "n1.web": "service", "n1.init": "task"})
    assert progress.failure("") == (
        "the DMS gave no reason; allocation n1.init never started; "
        "allocation n1.db failed (the DMS reports no exit code)" + IN_ITS_LOG
    )


def test_a_deployment_that_placed_nothing_says_so() -> None:
    assert _progress(DeploymentStatus.FAILED).failure("") == (
        "the DMS gave no reason; no allocation was placed (no peer's bid in time, "
        "or a commit failed)" + IN_ITS_LOG
    )


def test_the_dms_s_own_error_is_shown_as_it_is() -> None:
    assert _progress(DeploymentStatus.FAILED).failure("no bid") == "no bid"


def test_a_failed_allocation_of_a_deployment_that_ended_says_its_exit_code_is_unknown() -> None:
    progress = _progress(DeploymentStatus.COMPLETED, n1_job="failed", n1_ok="completed")
    assert progress.failure("") == "allocation n1.job failed (the DMS reports no exit code)"
