"""The rules for issuing tokens that ``nunet`` would break silently: expiries as it reads them
(and the ones that make dead tokens), capability paths, DIDs typed by people."""

from __future__ import annotations

import pytest

from dmsgw.clock import NS_PER_SECOND
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID, DIDError, from_string
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import Action, CapabilityContext
from dmsgw.keys.ucan.cap import CapabilityError, check_capability
from dmsgw.keys.ucan.expiry import (
    ExpiryError,
    check_revocable,
    expiry_after,
    future_expiry,
    parse_expiry,
)

NOW = 1_767_225_600 * NS_PER_SECOND  # 2026-01-01T00:00:00Z
HOUR = 3600 * NS_PER_SECOND
ISSUER = provider_from_private_key(Ed25519PrivKey(bytes([1]) * 32))


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2026-12-31", "2026-12-31T00:00:00Z"),
        ("2026-12-31 23:59:59", "2026-12-31T23:59:59Z"),
        ("2026-12-31T23:59:59Z", "2026-12-31T23:59:59Z"),
        ("2027-01-01T01:00:00+01:00", "2026-12-31T23:59:59.999999999Z"),
        ("31 Dec 26 23:59 UTC", "2026-12-31T23:59:00Z"),
        ("01 Jan 27 00:59 +0100", "2026-12-31T23:59:00Z"),
        ("01 Jan 69 00:00 GMT", "1969-01-01T00:00:00Z"),
    ],
)
def test_parse_expiry_layouts(text: str, iso: str) -> None:
    """``time.Parse`` with nunet's layouts; the offset case also keeps nanoseconds."""
    if iso.endswith(".999999999Z"):
        assert parse_expiry(text) == parse_expiry(iso) + 1
    else:
        assert parse_expiry(text) == parse_expiry(iso.replace("T", " ")[:-1])


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("tomorrow", "use 2025-12-31, '2025-12-31 23:59:59' (both UTC), RFC 3339"),
        ("2026-02-30", "day is out of range for month"),
        ("31 Dec 26 23:59 PST", "use 2025-12-31"),  # Go would read PST as UTC
    ],
)
def test_parse_expiry_refusals_give_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ExpiryError) as caught:
        parse_expiry(text)
    assert str(caught.value).startswith(reason)


def test_an_expiry_must_lie_after_now() -> None:
    assert future_expiry(NOW + 1, NOW) == NOW + 1
    with pytest.raises(ExpiryError, match="it is in the past"):
        future_expiry(NOW, NOW)  # the token would expire as it is issued


def test_a_past_expiry_is_named_to_the_second() -> None:
    with pytest.raises(ExpiryError, match=r"^it is in the past \(2025-12-31T23:00:00Z\)$"):
        future_expiry(NOW - HOUR + 5, NOW)


def test_a_lifetime_counts_from_now() -> None:
    assert expiry_after(NOW, HOUR) == NOW + HOUR


@pytest.mark.parametrize("duration", [0, -HOUR])
def test_a_lifetime_must_be_positive(duration: int) -> None:
    with pytest.raises(ExpiryError, match="must be positive"):
        expiry_after(NOW, duration)


def test_an_expired_token_has_nothing_to_revoke() -> None:
    ctx = CapabilityContext(ISSUER, clock=lambda: NOW)
    token = ctx.grant(Action.DELEGATE, ISSUER.did, DID(), None, NOW + HOUR, 0, ["/dms"]).present()[
        0
    ]
    check_revocable(token, NOW)
    with pytest.raises(ExpiryError, match="has already expired: there is nothing to revoke"):
        check_revocable(token, NOW + HOUR + 1)


@pytest.mark.parametrize("cap", ["/", "/dms/node", "/public"])
def test_a_capability_is_a_slash_path(cap: str) -> None:
    assert check_capability(cap) == cap


@pytest.mark.parametrize("cap", ["", "dms/node", " /dms"])
def test_anything_else_matches_no_behavior_and_is_refused(cap: str) -> None:
    with pytest.raises(CapabilityError, match="a capability is a path starting with '/'"):
        check_capability(cap)


def test_from_string_takes_a_did_with_a_usable_key() -> None:
    assert from_string(ISSUER.did.uri) == ISSUER.did
    assert from_string("did:web:example.org") == DID("did:web:example.org")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "expected did:<method>:<identifier>"),
        ("did:key", "expected did:<method>:<identifier>"),
        ("did::x", "expected did:<method>:<identifier>"),
        ("key:z6Mk:x", "expected did:<method>:<identifier>"),
        ("did:key:zzz", "'did:key:zzz'"),
        ("did:key:xyz", "multibase prefix 'x' is not supported"),
    ],
)
def test_from_string_refuses_what_no_one_could_use(text: str, problem: str) -> None:
    with pytest.raises(DIDError, match=problem.replace("(", r"\(")):
        from_string(text)
