"""Unsigned varints (multiformats / protobuf), as used by did:key codecs, multihashes and
libp2p key protobufs."""

from ..errors import DmsgwError


class VarintError(DmsgwError):
    """Bytes that are not a well-formed unsigned varint."""


_MAX_VARINT_BYTES = 9  # multiformats caps unsigned varints at 63 bits / 9 bytes


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise VarintError(f"cannot encode negative value {value} as a varint")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_uvarint(data: bytes, offset: int = 0) -> tuple[int, int]:
    """Read a varint at ``offset``; return ``(value, offset after it)``."""
    value = 0
    shift = 0
    for i in range(offset, min(len(data), offset + _MAX_VARINT_BYTES)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i > offset:
                raise VarintError("varint is not minimally encoded")
            return value, i + 1
        shift += 7
    if len(data) - offset < _MAX_VARINT_BYTES:
        raise VarintError("varint is truncated")
    raise VarintError("varint is longer than 9 bytes")
