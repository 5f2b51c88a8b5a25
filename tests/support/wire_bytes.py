"""Hand-encoded protobuf: the bytes a hostile client can send that no generated message class writes."""

from __future__ import annotations


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def varint_field(number: int, value: int) -> bytes:
    """Field `number` as a varint (wire type 0), any value up to 2**64 - 1 whatever the field's type."""
    return varint(number << 3) + varint(value)


def delimited_field(number: int, payload: bytes) -> bytes:
    """Field `number` as length-delimited bytes (wire type 2): a message, a string or packed values."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload
