"""The runner's error kinds and the one table that maps them to gRPC status codes."""

from __future__ import annotations

import difflib

import grpc

# A request field that an error message repeats is cut to this many characters, so that a huge field makes no
# huge message.
ECHO_CHARS = 100
# Any message that crosses the wire is cut to this many UTF-8 bytes: gRPC sends it in a trailer,
# percent-encoding each non-ASCII byte (three characters), and a client refuses trailers over 8 to 16 KiB
# with RESOURCE_EXHAUSTED in place of the real status.
MAX_MESSAGE_BYTES = 2048
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


class DeadlineExceeded(RunnerError):
    """A user's code (a plug-in's) that did not return within its limit."""

    status = grpc.StatusCode.DEADLINE_EXCEEDED


class Aborted(RunnerError):
    """A distributed run lost a rank: one died, failed, or went silent."""

    status = grpc.StatusCode.ABORTED


def did_you_mean(text: str, choices) -> str:
    """ " (did you mean resnet18?)" where an accepted value is close to the slip, else "": an aside to follow the
    refused value in a message."""
    found = difflib.get_close_matches(str(text), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {found[0]}?)" if found else ""


def echoed(text: str, quote: bool = True) -> str:
    """Request text as an error message repeats it: quoted (repr, so control characters show) unless
    `quote` is false, and cut to ECHO_CHARS characters, saying how long it was."""
    head = text[:ECHO_CHARS]
    head = repr(head) if quote else head
    return head if len(text) <= ECHO_CHARS else f"{head}... ({len(text)} characters)"


def _bounded(message: str) -> str:
    encoded = message.encode("utf-8", "replace")
    if len(encoded) <= MAX_MESSAGE_BYTES:
        return message
    return encoded[:MAX_MESSAGE_BYTES].decode("utf-8", "ignore") + "... (message cut)"


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client sees for an exception."""
    if isinstance(exc, RunnerError):
        return exc.status, _bounded(str(exc))
    return grpc.StatusCode.INTERNAL, _bounded(f"internal error in the runner: {type(exc).__name__}: {exc}")


def reason_for(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, RunnerError) else ""


def trailing_metadata_for(exc: BaseException) -> tuple[tuple[str, str], ...]:
    """What a client reads beside the status code: the reason, where the error has one."""
    reason = reason_for(exc)
    return ((REASON_KEY, reason),) if reason else ()


def abort(context, exc: BaseException) -> None:
    """End a gRPC call with `exc`'s status, message and reason."""
    context.set_trailing_metadata(trailing_metadata_for(exc))
    context.abort(*status_for(exc))


def _kinds(base: type[RunnerError] = RunnerError):
    for kind in base.__subclasses__():
        yield kind
        yield from _kinds(kind)


def error_from_status(code: grpc.StatusCode, message: str, reason: str = "") -> RunnerError:
    """The error kind a status code and reason stand for: an error that crossed a process boundary as them."""
    return next((kind for kind in _kinds() if (kind.status, kind.reason) == (code, reason)), RunnerError)(message)
