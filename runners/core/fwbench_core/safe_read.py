"""Reading a small file that someone else wrote (a plug-in's declaration, a TLS key, a sweep file): a regular file only,
opened without blocking and checked on the open descriptor, so that a FIFO, a device or a folder in its place is
refused at once (a FIFO would wait for a writer forever) and a file swapped between a check and the open is still
caught; and never more than a bound read. The aggregator reads its own files with it too."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileRefused(ValueError):
    """A file that is not read: not a regular file, over its bound, or not readable. The message names the path."""


class FileTooLarge(FileRefused):
    """A regular file over the bound it was read with; `limit_bytes` says the bound, for a caller's own message."""

    def __init__(self, message: str, limit_bytes: int) -> None:
        super().__init__(message)
        self.limit_bytes = limit_bytes


def _kind(mode: int) -> str:
    return next((name for is_kind, name in _KINDS if is_kind(mode)), "not a regular file")


def open_regular_file(path: str | os.PathLike) -> BinaryIO:
    """`path` opened for reading in binary, which must be a regular file (links are followed); FileRefused otherwise.
    The kind is checked before the open (opening a device may act on it) and again on the open descriptor."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(f"{path}: is {_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        raise FileRefused(f"{path}: cannot be read: {error.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FileRefused(f"{path}: is {_kind(mode)}, not a regular file")
    return os.fdopen(fd, "rb")


def read_small_file(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them: FileTooLarge where it holds more (read no
    further than one byte past the bound), FileRefused where it is no regular file or cannot be read."""
    with open_regular_file(path) as stream:
        try:
            data = stream.read(max_bytes + 1)
        except OSError as error:
            raise FileRefused(f"{path}: cannot be read: {error.strerror}") from None
    if len(data) > max_bytes:
        raise FileTooLarge(f"{path}: over {_size(max_bytes)}; at most {_size(max_bytes)} is read", max_bytes)
    return data


def _size(size_bytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size_bytes >= 1 << shift and size_bytes % (1 << shift) == 0:
            return f"{size_bytes >> shift} {unit}"
    return f"{size_bytes} bytes"
