"""Rebuilding a gRPC method handler around new behaviour: what the server's interceptors share."""

from __future__ import annotations

from collections.abc import Callable

import grpc

# Per (request streaming, response streaming): the handler's behaviour attribute and how to make one.
_HANDLER_KINDS = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


def rebuilt(handler: grpc.RpcMethodHandler, wrap: Callable, request_deserializer=None) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour passed through `wrap` (and, if given, another request deserializer)."""
    attribute, make = _HANDLER_KINDS[handler.request_streaming, handler.response_streaming]
    return make(
        wrap(getattr(handler, attribute)),
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
