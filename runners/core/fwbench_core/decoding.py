"""Requests that are not valid protobuf, such as a string field that is not UTF-8, refused as INVALID_ARGUMENT.

gRPC decodes a request before any handler runs and answers a failure with INTERNAL, as if the runner were
at fault. This interceptor decodes in gRPC's place: an undecodable request reaches the handler as a marker,
and the handler's wrapper aborts with INVALID_ARGUMENT before the servicer sees it.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError

from .handlers import rebuilt

class _Undecodable:
    def __init__(self, error: DecodeError) -> None:
        self.error = error


def _decoding(deserializer):
    def decode(data: bytes):
        try:
            return deserializer(data)
        except DecodeError as error:
            return _Undecodable(error)

    return decode


def _refuse_undecodable(request, context) -> None:
    if isinstance(request, _Undecodable):
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"request is not valid protobuf: {request.error}; every string field must be UTF-8",
        )


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
