"""Properties of capabilities and token chains, checked against an independent oracle."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dmsgw.clock import NS_PER_SECOND, FixedClock
from dmsgw.gojson import GoDecodeError, marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.trust import Provider, provider_from_private_key
from dmsgw.keys.ucan import (
    CapabilityContext,
    DMSToken,
    NotAuthorizedError,
    Token,
    TokenError,
    TokenList,
    implies,
    unmarshal_token_list,
)
from tests.support.vectors import load_vector

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_767_225_600 * NS_PER_SECOND

# --- implies ---------------------------------------------------------------------------------

SEGMENTS = st.sampled_from(["a", "ab", "b", "dms", "node", "x"])
PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s))


@given(st.text())
def test_implies_is_reflexive(c: str) -> None:
    assert implies(c, c)


@given(st.text())
def test_root_implies_everything(c: str) -> None:
    assert implies("/", c)


@given(PATHS, PATHS, PATHS)
def test_implies_is_transitive(a: str, b: str, c: str) -> None:
    if implies(a, b) and implies(b, c):
        assert implies(a, c)


@given(PATHS, st.text(min_size=1).filter(lambda s: not s.startswith("/")))
def test_implies_works_on_whole_segments(c: str, suffix: str) -> None:
    assert not implies(c, c + suffix)  # "/a" does not imply "/ab"
    assert implies(c, c + "/" + suffix)


@given(PATHS, PATHS)
def test_implies_is_path_prefix(c: str, o: str) -> None:
    assert implies(c, o) == (o.split("/")[: len(c.split("/"))] == c.split("/"))


# --- fast codec paths agree with the generic Go codec ----------------------------------------

TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8) | st.sampled_from(
    ["/dms/node", "a<b>&c", "é", "\u2028"]
)
DIDS = st.builds(DID, TEXT)
CAPS = st.none() | st.lists(TEXT, max_size=3).map(tuple)
UINTS = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1])


def dms_tokens(chain: st.SearchStrategy[Token | None]) -> st.SearchStrategy[DMSToken]:
    return st.builds(
        DMSToken,
        action=TEXT,
        issuer=DIDS,
        subject=DIDS,
        audience=DIDS,
        topic=CAPS,
        capability=CAPS,
        nonce=st.none() | st.binary(max_size=12),
        expire=UINTS,
        depth=UINTS,
        chain=chain,
        signature=st.none() | st.binary(max_size=8),
    )


TOKENS = st.recursive(
    st.builds(Token, dms=st.none()),
    lambda inner: st.builds(Token, dms=dms_tokens(st.none() | inner)),
    max_leaves=3,
)


@FAST
@given(TOKENS)
def test_fast_marshal_equals_generic(token: Token) -> None:
    if token.dms is not None:
        assert token.dms.to_json() == marshal(token.dms)
    blob = TokenList.of([token]).to_json()
    assert unmarshal_token_list(blob) == TokenList.from_json(blob)


def _refold(value: Any, draw: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
    """The same JSON with keys case-changed, nulls added or keys duplicated, at random."""
    if isinstance(value, dict):
        pairs = []
        for k, v in value.items():
            key = draw(st.sampled_from([k, k.upper(), k.capitalize()]))
            pairs.append(f"{json.dumps(key)}:{_refold(v, draw)}")
            if draw(st.integers(0, 9)) == 0:
                pairs.append(f"{json.dumps(k)}:null")
        return "{" + ",".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_refold(v, draw) for v in value) + "]"
    return json.dumps(value)


@FAST
@given(TOKENS, st.data())
def test_fast_decode_equals_generic_on_odd_json(token: Token, data: st.DataObject) -> None:
    text = _refold(json.loads(TokenList.of([token]).to_json()), data.draw)
    assert unmarshal_token_list(text.encode()) == TokenList.from_json(text)


# --- a signed token cannot be altered --------------------------------------------------------

SIGNED = load_vector("tokens.json")["tokens"]["invoke_third_two_hop"]["tokens_json"].encode()
ORIGINAL = TokenList.from_json(SIGNED).present()[0]


@FAST
@given(st.integers(0, len(SIGNED) - 1), st.integers(0, 255))
def test_any_single_byte_mutation_is_rejected(index: int, value: int) -> None:
    assume(SIGNED[index] != value)
    mutated = SIGNED[:index] + bytes([value]) + SIGNED[index + 1 :]
    try:
        tokens = unmarshal_token_list(mutated)
    except GoDecodeError:
        return
    assert tokens == TokenList.from_json(mutated)
    for token in tokens.present():
        try:
            token.verify(NOW)
        except TokenError:
            continue
        # accepted: then only the spelling changed (e.g. a key's case), not the authority
        assert token == ORIGINAL


# --- random delegation chains against an oracle ----------------------------------------------


def _provider(seed: int) -> Provider:
    return provider_from_private_key(Ed25519PrivKey(bytes([seed]) * 32))


KEYS = [_provider(seed) for seed in (10, 11, 12, 13)]  # KEYS[0] is the DMS
DMS = KEYS[0]
CHAIN_CAPS = ["/", "/dms", "/dms/node", "/dms/node/peers", "/dms/node/peers/list", "/dms/nodeX"]
EXPIRIES = [NOW - 1, NOW, NOW + 1, NOW + 2]


@dataclasses.dataclass(frozen=True)
class Hop:
    """One token of a chain, as plain facts for the oracle."""

    action: str
    issuer: int
    subject: int
    audience: int | None
    caps: tuple[str, ...]
    expire: int
    depth: int
    forged: bool


@dataclasses.dataclass(frozen=True)
class Scenario:
    hops: list[Hop]  # from the presented token (depth 0) down to the root
    sender: int
    roots: frozenset[int]
    required: str


@st.composite
def valid_chains(draw: st.DrawFn) -> Scenario:
    """A chain that keeps every rule: linked, narrowing, expiring in order, rooted in trust."""
    roots = draw(st.frozensets(st.integers(1, 3), max_size=1))
    n = draw(st.integers(1, 4))
    issuer = draw(st.sampled_from(sorted({0} | roots)))
    caps = (draw(st.sampled_from(["/", "/dms", "/dms/node"])),)
    expire = draw(st.sampled_from(EXPIRIES[1:]))
    root_first = []
    for i in range(n):
        subject = draw(st.integers(0, 3))
        root_first.append(
            Hop(
                action="invoke" if i == n - 1 else "delegate",
                issuer=issuer,
                subject=subject,
                audience=draw(st.sampled_from([None, None, 0])),
                caps=caps,
                expire=expire,
                depth=draw(st.sampled_from([0, 0, n - i - 1 or 1, n])),
                forged=False,
            )
        )
        issuer = subject
        caps = (draw(st.sampled_from([c for c in CHAIN_CAPS if implies(caps[0], c)])),)
        expire = draw(st.sampled_from([e for e in EXPIRIES if NOW <= e <= expire]))
    hops = root_first[::-1]
    # an audience restriction on a delegation binds the tokens below it
    hops = hops[:1] + [dataclasses.replace(h, audience=None) for h in hops[1:]]
    required = draw(st.sampled_from([c for c in CHAIN_CAPS if implies(hops[0].caps[0], c)]))
    return Scenario(hops, hops[0].subject, roots, required)


FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "action": st.sampled_from(["delegate", "invoke", "broadcast"]),
    "issuer": st.integers(0, 3),
    "subject": st.integers(0, 3),
    "audience": st.none() | st.integers(0, 3),
    "caps": st.lists(st.sampled_from(CHAIN_CAPS), max_size=2).map(tuple),
    "expire": st.sampled_from(EXPIRIES),
    "depth": st.sampled_from([0, 1, 2, 3]),
    "forged": st.booleans(),
}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """A valid chain with zero to two random changes to a hop, the sender or the request."""
    scenario = draw(valid_chains())
    hops = list(scenario.hops)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(hops) - 1))
        field = draw(st.sampled_from(sorted(FIELDS)))
        hops[i] = dataclasses.replace(hops[i], **{field: draw(FIELDS[field])})
    sender = draw(st.sampled_from([scenario.sender] * 4 + [0, 1, 2, 3]))
    required = draw(st.sampled_from([scenario.required] * 4 + CHAIN_CAPS))
    return Scenario(hops, sender, scenario.roots, required)


def build(hops: list[Hop]) -> DMSToken:
    token: DMSToken | None = None
    for i, hop in reversed(list(enumerate(hops))):
        signer = KEYS[(hop.issuer + 1) % 4] if hop.forged else KEYS[hop.issuer]
        token = DMSToken(
            action=hop.action,
            issuer=KEYS[hop.issuer].did,
            subject=KEYS[hop.subject].did,
            audience=KEYS[hop.audience].did if hop.audience is not None else DID(),
            capability=hop.caps,
            nonce=bytes([i]) * 12,
            expire=hop.expire,
            depth=hop.depth,
            chain=Token(dms=token) if token is not None else None,
        ).signed(signer)
    assert token is not None
    return token


def oracle(scenario: Scenario) -> bool:
    """The DMS's rules, restated flat over the list of hops (index = depth below the top)."""
    hops = scenario.hops
    if any(h.expire < NOW or h.forged for h in hops):
        return False
    if any(h.depth and i > h.depth for i, h in enumerate(hops)):
        return False
    for i, (t, granting) in enumerate(itertools.pairwise(hops)):
        if granting.action != "delegate" or t.expire > min(h.expire for h in hops[i + 1 :]):
            return False
        if t.issuer != granting.subject:
            return False
        if granting.audience is not None and granting.audience != t.audience:
            return False
        if not all(any(implies(g, c) for g in granting.caps) for c in t.caps):
            return False
    top = hops[0]
    trusted = {0} | scenario.roots
    return (
        top.action == "invoke"
        and top.subject == scenario.sender
        and top.audience in (None, 0)
        and any(implies(c, scenario.required) for c in top.caps)
        and any(h.issuer in trusted for h in hops)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_chains_are_judged_as_the_rules_say(scenario: Scenario) -> None:
    sender = KEYS[scenario.sender]
    roots = [KEYS[r].did for r in sorted(scenario.roots)]
    ctx = CapabilityContext(DMS, roots=roots, clock=FixedClock(NOW))
    blob = TokenList.of([Token(dms=build(scenario.hops))]).to_json()
    sender_id = ID.from_public_key(sender.private_key.public_key())
    own_id = ID.from_public_key(DMS.private_key.public_key())
    ctx.consume(sender.did, blob)
    try:
        ctx.require(DMS.did, sender_id, own_id, [scenario.required])
        accepted = True
    except NotAuthorizedError as exc:
        accepted = False
        assert exc.rejections
    assert accepted == oracle(scenario)
    assert ctx.explain_require(DMS.did, sender_id, own_id, [scenario.required]).ok == accepted
