"""Per-message cryptographic cost of the project against bare Ed25519, measured in one run.

The floor is what no implementation can avoid: `cryptography`'s Ed25519 sign/verify on exactly
the bytes the DMS signs (precomputed, so the floor does no encoding at all), and only the
signatures the project's row checks: a receiver verifies and never signs, and a grant whose
signature the project has verified before (its cache, ``_signed_by``) is not verified again by
the floor of the cached row either. The project's figures include everything it really does per
message: building and Go-encoding the envelope, decoding received bytes, re-encoding them
canonically, parsing capability tokens, checking expiry, chains and capabilities. Each figure
is CPU time of this one thread (``time.thread_time``): wall time too, on an idle core.

    .venv/bin/python bench/crypto.py [--seconds 0.5]

Target: every ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from dmsgw.clock import FixedClock
from dmsgw.gojson import marshal
from dmsgw.keys.crypto import Ed25519PrivKey
from dmsgw.keys.did import DID
from dmsgw.keys.id import ID
from dmsgw.keys.trust import provider_from_private_key
from dmsgw.keys.ucan import Action, CapabilityContext, TokenList, unmarshal_token_list
from dmsgw.keys.ucan import token as token_module
from dmsgw.transport import envelope as env
from dmsgw.transport.security import SecurityContext

NOW = 1_767_225_600 * 10**9
HOUR = 3600 * 10**9
DMS_KEY = Ed25519PrivKey(bytes(range(32)))
GW_KEY = Ed25519PrivKey(bytes(range(32, 64)))
DMS = env.Handle.from_public_key(DMS_KEY.public_key())
GW = env.Handle(
    ID.from_public_key(GW_KEY.public_key()),
    DID.from_public_key(GW_KEY.public_key()),
    env.Address(DMS.addr.host, "user-1"),
)
BEHAVIOR = "/dms/node/peers/list"


def per_op(
    project: Callable[[], object], floor: Callable[[], object], seconds: float
) -> tuple[float, float]:
    """The best mean seconds per call of ``project`` and of ``floor``, over ten samples of
    each taken in turn (about ``seconds / 10`` a sample): a slow spell of the machine (another
    process on the shared cores, a neighbour on the host) then falls on both sides alike,
    where five samples of one side and then five of the other could put it all on one side
    (the same code's rows moved by half between runs)."""
    calls = [_calibrated(project, seconds), _calibrated(floor, seconds)]
    best = [float("inf"), float("inf")]
    for _ in range(10):
        for side, fn in enumerate((project, floor)):
            start = time.thread_time()
            for _ in range(calls[side]):
                fn()
            best[side] = min(best[side], (time.thread_time() - start) / calls[side])
    return best[0], best[1]


def _calibrated(fn: Callable[[], object], seconds: float) -> int:
    """Calls of ``fn`` that take about ``seconds / 20``."""
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start > seconds / 200:
            return calls * 10
        calls *= 2


def _contexts() -> tuple[CapabilityContext, CapabilityContext, TokenList]:
    clock = FixedClock(NOW)
    dms_ctx = CapabilityContext(provider_from_private_key(DMS_KEY), clock=clock)
    grant = dms_ctx.grant(Action.DELEGATE, GW.did, DID(), None, NOW + 24 * HOUR, 0, ["/dms/node"])
    gw_ctx = CapabilityContext(provider_from_private_key(GW_KEY), provide=grant, clock=clock)
    return dms_ctx, gw_ctx, grant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    seconds = parser.parse_args().seconds
    dms_ctx, gw_ctx, _ = _contexts()
    gateway = SecurityContext(GW_KEY, gw_ctx, clock=FixedClock(NOW))
    dms = SecurityContext(DMS_KEY, dms_ctx, clock=FixedClock(NOW))

    # 1. An envelope: build + sign + encode on one side, decode + verify on the other.
    def project_envelope() -> None:
        msg = env.message(GW, DMS, BEHAVIOR, reply_to="/private/user/1", nonce=7, expire=NOW + HOUR)
        env.receive(marshal(env.sign(msg, GW_KEY)), NOW)

    sample = env.sign(env.message(GW, DMS, BEHAVIOR, nonce=7, expire=NOW + HOUR), GW_KEY)
    sig_data = sample.signature_data()
    raw_key = GW_KEY._key  # the bare cryptography key: the floor uses no project code
    raw_pub = raw_key.public_key()

    def floor_envelope() -> None:
        raw_pub.verify(raw_key.sign(sig_data), sig_data)

    # 2. A chained invoke token (invoke <- DMS grant): decode + verify, as a receiver does.
    invoke_blobs = [
        gw_ctx.provide(DMS.did, GW.id, DMS.id, NOW + HOUR - i, [BEHAVIOR]) for i in range(4096)
    ]
    # The blob holds what a gateway sends: the invoke token chained on the grant, plus the
    # self-signed invoke token the DMS API always adds; the floor checks every signature once.
    raw_pubs = []
    uncached = []  # what the project verifies once the grant's signature is in its cache
    for top in unmarshal_token_list(invoke_blobs[0]).present():
        t = top.dms
        while t is not None:
            pub = DID(t.issuer.uri).public_key()
            check = (t.signature_data(), t.signature, pub._key)  # type: ignore[attr-defined]
            raw_pubs.append(check)
            if t.issuer.uri != DMS.did.uri:  # the grant is the DMS's: the same in every blob
                uncached.append(check)
            t = t.chain.dms if t.chain is not None else None

    def floor_chain() -> None:
        for data, sig, pub in raw_pubs:
            pub.verify(sig, data)

    def floor_chain_cached() -> None:
        for data, sig, pub in uncached:
            pub.verify(sig, data)

    blob_iter = iter(range(10**12))

    def project_chain_warm() -> None:
        blob = invoke_blobs[next(blob_iter) % len(invoke_blobs)]
        for tok in unmarshal_token_list(blob).present():
            tok.verify(NOW)

    def project_chain_cold() -> None:
        token_module._signed_by.cache_clear()
        project_chain_warm()

    # 3. A whole request as the DMS receives it: envelope + capability check.
    requests = [
        marshal(
            gateway.provide(
                env.message(GW, DMS, BEHAVIOR, reply_to="/private/user/1", expire=NOW + HOUR - i),
                [BEHAVIOR],
            )
        )
        for i in range(4096)
    ]
    request_iter = iter(range(10**12))

    def project_receive() -> None:
        data = requests[next(request_iter) % len(requests)]
        msg = env.receive(data, NOW)
        dms.require(msg, [BEHAVIOR])
        dms_ctx.discard(msg.cap or b"")

    signed = raw_key.sign(sig_data)

    def floor_receive() -> None:  # the grant, the same in every request, is cached too
        raw_pub.verify(signed, sig_data)  # the envelope's signature (a receiver never signs)
        floor_chain_cached()  # and every token signature the project checks

    rows = [
        ("envelope sign + verify", project_envelope, floor_envelope),
        ("token list verify (grant cached)", project_chain_warm, floor_chain_cached),
        ("token list verify (cold)", project_chain_cold, floor_chain),
        ("DMS receive: envelope + capabilities", project_receive, floor_receive),
    ]
    print(f"{'measurement':42} {'project':>12} {'floor':>12} {'ratio':>7} {'msgs/s':>9}")
    ratios = []
    for name, project, floor in rows:
        p, f = per_op(project, floor, seconds)
        ratios.append(p / f)
        print(f"{name:42} {p * 1e6:9.1f} µs {f * 1e6:9.1f} µs {p / f:6.2f}x {1 / p:9.0f}")
    worst = max(ratios)
    print(f"\nworst ratio {worst:.2f}x (target <= 1.5x): {'met' if worst <= 1.5 else 'NOT met'}")
    print(f"median ratio {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
