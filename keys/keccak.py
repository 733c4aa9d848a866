"""Keccak-256 as Ethereum (and Go's ``sha3.NewLegacyKeccak256``) uses it.

Not :func:`hashlib.sha3_256`: FIPS 202 SHA3 pads with the domain bits ``0x06``, the original
Keccak submission that Ethereum froze pads with ``0x01``, so the digests differ for every input.
Neither the standard library nor ``cryptography`` offers the legacy padding, and this hash only
runs on short messages when an Eth signature is checked, so a plain Python sponge is enough.
"""

from __future__ import annotations

__all__ = ["keccak256", "sponge_256"]

_LANE_MASK = (1 << 64) - 1
_ROUNDS = 24
_RATE_256 = 136  # bytes absorbed per permutation for a 256-bit capacity-512 sponge
_KECCAK_DOMAIN = 0x01


def _rotl(lane: int, shift: int) -> int:
    return ((lane << shift) | (lane >> (64 - shift))) & _LANE_MASK if shift else lane


def _round_constants() -> tuple[int, ...]:
    """The iota constants, from the LFSR x^8 + x^6 + x^5 + x^4 + 1 of FIPS 202 §3.2.5."""
    bits: list[int] = []
    register = 1
    for _ in range(7 * _ROUNDS):
        bits.append(register & 1)
        register <<= 1
        if register & 0x100:
            register ^= 0x171
    return tuple(
        sum(bits[7 * rnd + j] << ((1 << j) - 1) for j in range(7)) for rnd in range(_ROUNDS)
    )


def _rho_pi_table() -> tuple[tuple[int, int], ...]:
    """For each source lane ``x + 5y``: (destination lane after pi, rho rotation)."""
    offsets = [0] * 25
    x, y = 1, 0
    for t in range(24):
        offsets[x + 5 * y] = ((t + 1) * (t + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    return tuple(
        (y + 5 * ((2 * x + 3 * y) % 5), offsets[x + 5 * y]) for y in range(5) for x in range(5)
    )


_RC = _round_constants()
_RHO_PI = _rho_pi_table()


def _permute(state: list[int]) -> None:
    """Keccak-f[1600] in place; lane ``x + 5y`` holds the little-endian 64-bit word A[x, y]."""
    for rc in _RC:
        parity = [
            state[x] ^ state[x + 5] ^ state[x + 10] ^ state[x + 15] ^ state[x + 20]
            for x in range(5)
        ]
        theta = [parity[(x - 1) % 5] ^ _rotl(parity[(x + 1) % 5], 1) for x in range(5)]
        moved = [0] * 25
        for lane, (dest, shift) in enumerate(_RHO_PI):
            moved[dest] = _rotl(state[lane] ^ theta[lane % 5], shift)
        for row in range(0, 25, 5):
            a, b, c, d, e = moved[row : row + 5]
            state[row : row + 5] = [
                a ^ (~b & c),
                b ^ (~c & d),
                c ^ (~d & e),
                d ^ (~e & a),
                e ^ (~a & b),
            ]
        state[0] ^= rc


def sponge_256(data: bytes, domain: int) -> bytes:
    """A 256-bit digest with the given padding domain byte (``0x01`` Keccak, ``0x06`` SHA3)."""
    padded = bytearray(data)
    padded.append(domain)
    padded.extend(bytes(-len(padded) % _RATE_256))
    padded[-1] |= 0x80
    state = [0] * 25
    for start in range(0, len(padded), _RATE_256):
        block = padded[start : start + _RATE_256]
        for i in range(_RATE_256 // 8):
            state[i] ^= int.from_bytes(block[8 * i : 8 * i + 8], "little")
        _permute(state)
    return b"".join(lane.to_bytes(8, "little") for lane in state[:4])


def keccak256(data: bytes) -> bytes:
    """Legacy Keccak-256 (Ethereum's ``keccak256``): 32 bytes."""
    return sponge_256(data, _KECCAK_DOMAIN)
