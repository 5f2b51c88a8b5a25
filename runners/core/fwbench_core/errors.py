"""The runner's error kinds and the one table that maps them to gRPC status codes."""

from __future__ import annotations

import grpc


class RunnerError(Exception):
    """An error whose message is meant for the user as it is."""

    status = grpc.StatusCode.INTERNAL


class InvalidArgument(RunnerError):
    status = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(RunnerError):
    status = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(RunnerError):
    status = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(RunnerError):
    status = grpc.StatusCode.RESOURCE_EXHAUSTED


class Cancelled(RunnerError):
    status = grpc.StatusCode.CANCELLED


class Unavailable(RunnerError):
    status = grpc.StatusCode.UNAVAILABLE


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client sees for an exception."""
    if isinstance(exc, RunnerError):
        return exc.status, str(exc)
    return grpc.StatusCode.INTERNAL, f"internal error in the runner: {type(exc).__name__}: {exc}"


def error_from_status(code: grpc.StatusCode, message: str) -> RunnerError:
    """The error kind a status code stands for: an error that crossed a process boundary as its status."""
    kinds = {kind.status: kind for kind in RunnerError.__subclasses__()}
    return kinds.get(code, RunnerError)(message)
