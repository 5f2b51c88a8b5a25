"""The runner's error kinds and the one table that maps them to gRPC status codes."""

from __future__ import annotations

import grpc

# Trailing metadata that says why a request was refused, where the status code alone cannot (runner.proto):
# a client tells a batch too large for the device from a runner that is merely busy.
REASON_KEY = "fwbench-reason"


class RunnerError(Exception):
    """An error whose message is meant for the user as it is."""

    status = grpc.StatusCode.INTERNAL
    reason = ""  # sent as REASON_KEY where set


class InvalidArgument(RunnerError):
    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(RunnerError):
    status = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(RunnerError):
    status = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(RunnerError):
    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class OutOfMemory(ResourceExhausted):
    reason = "out-of-memory"


class Busy(ResourceExhausted):
    reason = "busy"


class Cancelled(RunnerError):
    status = grpc.StatusCode.CANCELLED


class Unavailable(RunnerError):
    status = grpc.StatusCode.UNAVAILABLE


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client sees for an exception."""
    if isinstance(exc, RunnerError):
        return exc.status, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error in the runner: {type(exc).__name__}: {exc}"


def reason_for(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, RunnerError) else ""


def trailing_metadata_for(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """What a client reads beside the status code: the reason, where the error has one."""
    reason = reason_for(exc)
    return ((REASON_KEY, reason),) if reason else ()


def _kinds(base: type[RunnerError] = RunnerError):
    for kind in base.__subclasses__():
        yield kind
        yield from _kinds(kind)


def error_from_status(code: grpc.StatusCode, message: str, reason: str = "") -> RunnerError:
    """The error kind a status code and reason stand for: an error that crossed a process boundary as them."""
    return next((kind for kind in _kinds() if (kind.status, kind.reason) == (code, reason)), RunnerError)(message)
