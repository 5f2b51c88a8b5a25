"""Requests that are not valid protobuf (a string field that is not UTF-8, bytes that are no message at all), or
whose 32-bit integer fields carry more than 32 bits, refused as INVALID_ARGUMENT.

gRPC decodes a request before any handler runs and answers a failure with INTERNAL, as if the runner were
at fault. This interceptor decodes in gRPC's place: a refused request reaches the handler as a marker, and
the handler's wrapper aborts with INVALID_ARGUMENT before the servicer sees it.

Protobuf decodes a varint too large for a 32-bit field by keeping its low 32 bits: a batch_size of 2**40 would
arrive as 0 and be refused as "got 0", and an enum of 2**32 + 1 would pass as 1. The bytes are still here, so
such a field is refused naming the value sent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from .handlers import rebuilt


def _signed(wire: int) -> int:
    """A varint as the int64 it encodes: a negative int32 or enum travels sign-extended to 64 bits."""
    return wire - 2**64 if wire >= 2**63 else wire


# The 32-bit integer types: the number a varint on the wire means, and the range the field holds.
_RANGES: dict[int, tuple[Callable[[int], int], int, int, str]] = {
    FieldDescriptor.TYPE_UINT32: (int, 0, 2**32 - 1, "uint32"),
    FieldDescriptor.TYPE_INT32: (_signed, -(2**31), 2**31 - 1, "int32"),
    FieldDescriptor.TYPE_ENUM: (_signed, -(2**31), 2**31 - 1, "enum (int32)"),
}


class _Refused:
    def __init__(self, message: str) -> None:
        self.message = message


def _decoding(deserializer):
    def decode(data: bytes):
        try:
            request = deserializer(data)
        except DecodeError as error:
            hint = "; every string field must be UTF-8" if "utf-8" in str(error).lower() else ""
            return _Refused(f"request is not valid protobuf: {error}{hint}")
        too_wide = overflowing_field(data, request.DESCRIPTOR)
        return _Refused(too_wide) if too_wide else request

    return decode


def overflowing_field(data: bytes, descriptor: Descriptor, prefix: str = "") -> str | None:
    """The first 32-bit integer field of the message `data` (well-formed: it decoded) whose value on the wire
    does not fit the field, described; None where every one fits."""
    for number, value in _fields(data):
        field = descriptor.fields_by_number.get(number)
        if field is None:
            continue
        if field.message_type is not None and isinstance(value, bytes):
            found = overflowing_field(value, field.message_type, f"{prefix}{field.name}.")
            if found:
                return found
        elif field.type in _RANGES:
            meaning, low, high, kind = _RANGES[field.type]
            # A repeated field's values may come packed: one length-delimited run of varints. A singular field
            # sent so is an unknown field to protobuf, which leaves the field unset.
            packed = _varints(value) if isinstance(value, bytes) and _repeated(field) else ()
            for sent in map(meaning, [value] if isinstance(value, int) else packed):
                if not low <= sent <= high:
                    range_ = f"{low} to {high}"
                    return (
                        f"{prefix}{field.name} is {sent} on the wire: beyond the range of its {kind} field ({range_})"
                    )
    return None


def _repeated(field: FieldDescriptor) -> bool:
    # protobuf 7 has only is_repeated; protobuf 5 (an older TensorFlow's image) only label.
    return field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        shift += 7
        if byte < 0x80:
            return value, at


def _varints(data: bytes) -> Iterator[int]:
    at = 0
    while at < len(data):
        value, at = _varint(data, at)
        yield value


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(number, varint or length-delimited bytes) of each top-level field of a well-formed message; fixed-width
    fields and groups (none in this contract) are skipped."""
    at, group_depth = 0, 0
    value: int | bytes
    while at < len(data):
        key, at = _varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = _varint(data, at)
        elif wire_type == 2:
            length, at = _varint(data, at)
            value, at = data[at : at + length], at + length
        else:
            at += {1: 8, 5: 4}.get(wire_type, 0)
            group_depth += {3: 1, 4: -1}.get(wire_type, 0)
            continue
        if group_depth == 0:
            yield number, value


def _refuse_undecodable(request, context) -> None:
    if isinstance(request, _Refused):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)


def _checking_one(behaviour):
    def handle(request, context):
        _refuse_undecodable(request, context)
        return behaviour(request, context)

    return handle


def _checking_each(behaviour):
    def handle(requests, context):
        def checked():
            for request in requests:
                _refuse_undecodable(request, context)
                yield request

        return behaviour(checked(), context)

    return handle


class RequestDecodingInterceptor(grpc.ServerInterceptor):
    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        check = _checking_each if handler.request_streaming else _checking_one
        return rebuilt(handler, check, request_deserializer=_decoding(handler.request_deserializer))
