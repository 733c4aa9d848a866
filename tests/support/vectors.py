"""The golden vectors produced by the DMS Go packages (``tests/vectors``), and the capability
cases of ``tokens.json`` that the UCAN and preflight tests both check verdicts against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmsgw.keys.ucan import Reason

VECTORS = Path(__file__).parent.parent / "vectors"


def load_vector(name: str) -> Any:
    return json.loads((VECTORS / name).read_text())


_TOKEN_VECTORS = load_vector("tokens.json")
KEYS = _TOKEN_VECTORS["keys"]
TOKENS = _TOKEN_VECTORS["tokens"]
CASES = _TOKEN_VECTORS["require_cases"]
NOW_2026 = 1_767_225_600 * 1_000_000_000

# Why each refused case is refused: the explanation the DMS cannot give.
EXPECTED_REASONS = {
    "invalid_require_anchor_cap_not_covered": Reason.NOT_IMPLIED,
    "invalid_self_signed_not_root": Reason.UNTRUSTED_ISSUER,
    "invalid_cap_not_implied_prefix": Reason.NOT_IMPLIED,
    "invalid_cap_other_namespace": Reason.NOT_IMPLIED,
    "invalid_token_cap_not_allowed_by_chain": Reason.NOT_ALLOWED_BY_CHAIN,
    "invalid_narrow_grant": Reason.NOT_ALLOWED_BY_CHAIN,
    "invalid_expired_invoke": Reason.EXPIRED,
    "invalid_expired_grant": Reason.EXPIRED,
    "invalid_invoke_outlives_chain": Reason.CHAIN_OUTLIVED,
    "invalid_wrong_audience": Reason.WRONG_AUDIENCE,
    "invalid_wrong_subject": Reason.WRONG_SUBJECT,
    "invalid_sender_not_subject": Reason.WRONG_SUBJECT,
    "invalid_broken_signature": Reason.BAD_SIGNATURE,
    "invalid_broken_chain_signature": Reason.BAD_SIGNATURE,
    "invalid_tampered_exp": Reason.BAD_SIGNATURE,
    "invalid_untrusted_issuer": Reason.UNTRUSTED_ISSUER,
    "invalid_chain_not_delegate": Reason.CHAIN_NOT_DELEGATE,
    "invalid_depth_exceeded": Reason.DEPTH_EXCEEDED,
    "invalid_revoked_grant": Reason.REVOKED,
    "invalid_no_cap": Reason.BAD_CAP_JSON,
    "invalid_no_required_caps": Reason.NO_CAPABILITY,
    "invalid_cap_too_big": Reason.CAP_TOO_BIG,
    "invalid_cap_not_json": Reason.BAD_CAP_JSON,
}
