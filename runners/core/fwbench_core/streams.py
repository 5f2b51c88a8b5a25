"""Long-lived streams other than runs (health Watch, server reflection) held to a few at once.

Each open stream holds a server thread for as long as its client keeps it; unbounded, a few of them would
take the threads Describe, ListModels and health checks are answered on. Runs have their own limit
(--max-queued-requests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc

from .errors import Busy, abort
from .handlers import rebuilt


class OpenStreamLimit(grpc.ServerInterceptor):
    def __init__(self, limit: int, exempt: frozenset[str]) -> None:
        """At most `limit` response streams open at once, not counting the methods in `exempt`."""
        self.limit = limit
        self._exempt = exempt
        self._open = 0
        self._guard = threading.Lock()

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not handler.response_streaming or handler_call_details.method in self._exempt:
            return handler
        return rebuilt(handler, self._limited)

    def _limited(self, behaviour):
        def handle(request, context) -> Iterator:
            if not self._enter():
                abort(
                    context,
                    Busy(
                        f"the runner is busy: {self.limit} streams (health watches, reflection) are open, its "
                        "limit; close one or retry later"
                    ),
                )
            try:
                yield from behaviour(request, context)
            finally:
                with self._guard:
                    self._open -= 1

        return handle

    def _enter(self) -> bool:
        with self._guard:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True
