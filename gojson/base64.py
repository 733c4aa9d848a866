"""Go's ``base64.StdEncoding.DecodeString``, which ``encoding/json`` uses for ``[]byte``.

Go skips CR and LF anywhere and accepts non-zero unused trailing bits, which Python's strict
decoder refuses; a refusal must carry Go's ``CorruptInputError`` offset.
"""

from __future__ import annotations

import binascii

__all__ = ["CorruptInputError", "go_base64_decode", "go_base64_decode_exact"]

_DECODE_MAP = bytes(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".find(bytes([c])) % 256
    for c in range(256)
)  # 0xff for bytes outside the alphabet


class CorruptInputError(Exception):
    """Go's ``base64.CorruptInputError``: the offset of the first byte Go refuses."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def go_base64_decode(src: str | bytes) -> bytes:
    """``base64.StdEncoding.DecodeString`` of ``src`` (a ``str`` as its UTF-8 bytes): padding
    required, CR and LF skipped anywhere, non-zero unused trailing bits accepted; errors carry
    Go's ``CorruptInputError`` offset."""
    try:
        return binascii.a2b_base64(src, strict_mode=True)
    except ValueError:  # binascii.Error, or a str that is not ASCII
        pass  # refused: the exact port below decides, and finds the offset Go reports
    return go_base64_decode_exact(src.encode("utf-8") if isinstance(src, str) else src)


def go_base64_decode_exact(src: bytes) -> bytes:
    """A line-by-line port of Go's ``(*Encoding).Decode``/``decodeQuantum`` for StdEncoding."""
    out = bytearray()
    si, n = 0, len(src)
    while si < n:
        quantum = [0, 0, 0, 0]
        dlen = 4
        j = 0
        while j < 4:
            if si == n:
                if j == 0:
                    return bytes(out)
                raise CorruptInputError(si - j)
            c = src[si]
            si += 1
            value = _DECODE_MAP[c]
            if value != 0xFF:
                quantum[j] = value
                j += 1
                continue
            if c in (0x0A, 0x0D):  # newlines are ignored
                continue
            if c != 0x3D:  # "="
                raise CorruptInputError(si - 1)
            # Padding: the end of the data.
            if j < 2:
                raise CorruptInputError(si - 1)
            if j == 2:  # "==" expected; the first "=" is consumed
                while si < n and src[si] in (0x0A, 0x0D):
                    si += 1
                if si == n:
                    raise CorruptInputError(n)
                if src[si] != 0x3D:
                    raise CorruptInputError(si - 1)
                si += 1
            while si < n and src[si] in (0x0A, 0x0D):
                si += 1
            if si < n:
                raise CorruptInputError(si)  # trailing garbage
            dlen = j
            break
        val = quantum[0] << 18 | quantum[1] << 12 | quantum[2] << 6 | quantum[3]
        out += val.to_bytes(3, "big")[: dlen - 1]
    return bytes(out)
