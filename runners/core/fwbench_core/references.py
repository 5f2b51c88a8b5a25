"""The runner's reference folder: the one place where parity reference files are read and written.

A request names a reference by a plain file name, never a path: the name is checked, files are opened
relative to the folder without following symbolic links or blocking, only regular files are read, sizes
are bounded, and a write lands in a temporary file that is then renamed over the name (a rename replaces
a symbolic link itself, never its target). Messages name the reference, never a path.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import re
import stat
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from .choices import InputKind, Precision
from .errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, RunnerError
from .models import ModelConfig, ModelSpec, ReferenceReport
from .system_folders import system_folder

REFERENCE_DIR_ENV = "FWBENCH_REFERENCE_DIR"
DEFAULT_MAX_REFERENCE_BYTES = 1 << 30  # VGG-16's weights alone take 553 MB
MAX_NAME_CHARS = 128
SHOWN_NAME_CHARS = 64
NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME_CHARS - 5}}}\.npz")
NAME_RULE = (
    f"a plain file name in the runner's reference folder: letters, digits, '.', '_' and '-', starting with a "
    f"letter or digit, ending in '.npz', at most {MAX_NAME_CHARS} characters"
)
# What every reference holds besides its weights (weights/<PyTorch parameter name>).
REQUIRED_ARRAYS = ("input", "output")
READ_CHUNK_BYTES = 1 << 20
SHOWN_REASON_CHARS = 200


def shown(name: str) -> str:
    """A name as messages quote it: cut to a readable length."""
    return repr(name[:SHOWN_NAME_CHARS]) + ("..." if len(name) > SHOWN_NAME_CHARS else "")


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(f"name {shown(name)} is not accepted; name must be {NAME_RULE}")
    return name


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:SHOWN_REASON_CHARS]


class ReferenceFolder:
    def __init__(
        self,
        path: str,
        max_bytes: int = DEFAULT_MAX_REFERENCE_BYTES,
        temporary: tempfile.TemporaryDirectory | None = None,
    ) -> None:
        """`temporary`: the folder is this temporary one, removed by close() (or at the latest at exit)."""
        self.path = path
        self.max_bytes = max_bytes
        self._temporary = temporary

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()

    def _open_folder(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise FailedPrecondition(f"this runner's reference folder cannot be opened: {error.strerror}") from None

    def read(self, name: str) -> dict[str, np.ndarray]:
        """The arrays of reference `name`, checked to hold every array a reference must."""
        check_name(name)
        return self._parse(name, self._read_bytes(name))

    def _read_bytes(self, name: str) -> bytes:
        folder = self._open_folder()
        try:
            # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            raise NotFound(f"no reference named {shown(name)} in this runner's reference folder") from None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise InvalidArgument(
                    f"reference {shown(name)} is a symbolic link; references are regular files"
                ) from None
            raise InvalidArgument(f"reference {shown(name)} cannot be opened: {error.strerror}") from None
        finally:
            os.close(folder)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgument(f"reference {shown(name)} is not a regular file")
            if info.st_size > self.max_bytes:
                raise InvalidArgument(self._too_large(name, info.st_size))
            chunks, size = [], 0
            # Read at most one byte past the bound: a file that grows while we read is cut off there.
            while chunk := os.read(fd, min(READ_CHUNK_BYTES, self.max_bytes + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    raise InvalidArgument(self._too_large(name, size))
            return b"".join(chunks)
        except OSError as error:
            raise InvalidArgument(f"reference {shown(name)} cannot be read: {error.strerror}") from None
        finally:
            os.close(fd)

    def _too_large(self, name: str, size_bytes: int) -> str:
        return (
            f"reference {shown(name)} holds more than this runner's limit of {self.max_bytes} bytes "
            f"({size_bytes} or more; the runner flag --max-reference-bytes sets it)"
        )

    def _parse(self, name: str, data: bytes) -> dict[str, np.ndarray]:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                unpacked_bytes = sum(member.file_size for member in archive.infolist())
            if unpacked_bytes > self.max_bytes:
                raise InvalidArgument(self._too_large(name, unpacked_bytes))
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                arrays = {key: archive[key] for key in archive.files}
        except InvalidArgument:
            raise
        except Exception as error:
            # Whatever parsing untrusted bytes raises (zipfile's and NumPy's many kinds) is the file's fault.
            raise InvalidArgument(f"reference {shown(name)} is not a valid .npz file: {_reason(error)}") from None
        for key, value in arrays.items():
            # A member that is not a .npy array comes back as its raw bytes.
            if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
                raise InvalidArgument(f"reference {shown(name)}: {shown(key)} is not an array of numbers")
        missing = [key for key in REQUIRED_ARRAYS if key not in arrays]
        if missing:
            raise InvalidArgument(
                f"reference {shown(name)} lacks the array(s) {', '.join(missing)}; a reference holds input, "
                "output and weights/<parameter name> arrays"
            )
        return arrays

    def write(self, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        """Store `arrays` as reference `name`, replacing any file of that name, atomically."""
        check_name(name)
        size_bytes = sum(array.nbytes for array in arrays.values())
        if size_bytes > self.max_bytes:
            raise ResourceExhausted(
                f"reference {shown(name)} would take {size_bytes} bytes, more than this runner's limit of "
                f"{self.max_bytes} (the runner flag --max-reference-bytes sets it); try a smaller batch_size"
            )
        folder = self._open_folder()
        temporary = None
        try:
            # A leading dot: no request can name the file while it is being written.
            fd, temporary = tempfile.mkstemp(prefix=".", suffix=".partial", dir=self.path)
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), 0o644)  # the other runner may run as another user
                np.savez(file, allow_pickle=False, **arrays)
            os.replace(os.path.basename(temporary), name, src_dir_fd=folder, dst_dir_fd=folder)
            temporary = None
        except OSError as error:
            kind: type[RunnerError] = FailedPrecondition
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                kind = ResourceExhausted
            elif error.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                kind = InvalidArgument
            raise kind(
                f"reference {shown(name)} cannot be written in this runner's reference folder: {error.strerror}"
            ) from None
        finally:
            if temporary is not None:
                os.unlink(temporary)
            os.close(folder)


def compared_outputs(output: np.ndarray, expected: np.ndarray, tolerance: float) -> ReferenceReport:
    """A runner's output for a reference's input against the reference's output: max |output - expected| over
    max |expected| across the whole output, matched within `tolerance`; outputs of another shape match nothing."""
    if output.shape != expected.shape:
        return ReferenceReport(output_shape=tuple(output.shape), tolerance=tolerance)
    max_abs = float(np.max(np.abs(output - expected), initial=0.0))
    max_rel = max_abs / max(float(np.max(np.abs(expected), initial=0.0)), float(np.finfo(np.float32).tiny))
    return ReferenceReport(
        output_shape=tuple(output.shape),
        compared_values=int(expected.size),
        max_abs_diff=max_abs,
        max_rel_diff=max_rel,
        tolerance=tolerance,
        matched=max_rel <= tolerance,
    )


# The tokens a generating model's reference holds per prompt (greedy from the reference's input): enough to show two
# runners choose alike, few enough that a reference stays quick to make.
PARITY_NEW_TOKENS = 8
GENERATED_TOKENS = "generated_tokens"


# The most of a reference input's tokens its parity tokens are generated from. The outputs are compared over the
# whole input; the tokens show the cached decoding alike, which a short prompt shows as well: from gpt2_small's whole
# default input (1016 tokens) each decoder's tokens took 80-110 s per framework pair on a 2-core CPU.
PARITY_PROMPT_TOKENS = 32


def parity_prompt_length(spec: ModelSpec, input_length: int) -> int:
    """How many of a reference input's tokens every runner generates its parity tokens from: its first
    PARITY_PROMPT_TOKENS at most, and no more than leave room for PARITY_NEW_TOKENS within the model's longest
    sequence. One rule, so that the exporter and every comparing runner prompt alike."""
    return min(input_length, PARITY_PROMPT_TOKENS, spec.max_input_shape[0] - PARITY_NEW_TOKENS)


def tokens_key(precision: Precision) -> str:
    """The array a reference holds its greedy tokens in, named for their precision (the reader takes arrays of numbers
    only): generated_tokens for fp32, as before precisions were recorded, generated_tokens_amp_bf16 for bf16."""
    return GENERATED_TOKENS if precision is Precision.FP32 else f"{GENERATED_TOKENS}_{precision.value}"


def reference_tokens(config: ModelConfig, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """What a reference of a generating model holds beside its outputs: its greedy tokens, under their precision."""
    return {tokens_key(config.token_precision): tokens}


def expected_tokens(config: ModelConfig, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """A reference's greedy tokens in the precision `config` asks to compare in, refused where it holds none or holds
    tokens of another precision."""
    key = tokens_key(config.token_precision)
    if key in arrays:
        return arrays[key]
    held = [p.value for p in Precision if tokens_key(p) in arrays]
    if held:
        raise InvalidArgument(
            f"the reference's tokens were generated in {held[0]}, but precision asks to compare them in "
            f"{config.token_precision.value}: export the reference with the same precision"
        )
    raise InvalidArgument(
        f"the reference holds no {GENERATED_TOKENS}, which a reference of {config.model.name} (a model that "
        "generates) must: export it again with a torch runner that generates"
    )


def compared_tokens(
    report: ReferenceReport, config: ModelConfig, tokens: np.ndarray, expected: np.ndarray
) -> ReferenceReport:
    """`report` (the outputs compared) with a generating model's greedy tokens compared exactly, and the first
    position where any prompt's tokens differ. In fp32, matched only where the outputs matched and every token is the
    reference's; in a lower precision, where rounding alone may swap two close logits, the divergence is reported and
    the outputs alone decide."""
    if tokens.shape != expected.shape:
        return replace(report, matched=False, tokens_compared=0, first_token_divergence=0)
    differs = np.nonzero((tokens != expected).any(axis=0))[0]
    divergence = int(differs[0]) if differs.size else -1
    judged = config.token_precision is Precision.FP32
    return replace(
        report,
        matched=report.matched and (divergence == -1 or not judged),
        tokens_compared=int(expected.size),
        first_token_divergence=divergence,
    )


def check_input_fits(name: str, stored: np.ndarray, config: ModelConfig) -> None:
    """Refuse a reference whose input is not a batch the requested model takes: its shape, and for token
    models integer ids within the vocabulary."""
    expected = (config.batch_size, *config.input_shape)
    if stored.shape != expected:
        held, asked = ("x".join(map(str, shape)) for shape in (stored.shape, expected))
        raise InvalidArgument(
            f"reference {shown(name)} holds an input of shape {held}, but batch_size and input_shape ask for "
            f"{asked}; compare with the batch_size and input_shape it was exported with"
        )
    spec = config.model
    if spec.input_kind is InputKind.TOKENS:
        accepted = f"token ids, integers from 0 to {spec.vocab_size - 1}"
        fits = stored.dtype.kind in "iu" and (stored.size == 0 or 0 <= stored.min() and stored.max() < spec.vocab_size)
    else:
        accepted = "floating-point values"
        fits = stored.dtype.kind == "f"
    if not fits:
        raise InvalidArgument(
            f"reference {shown(name)} holds an input that {spec.name} cannot take: it takes {accepted}"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reference-dir",
        default=os.environ.get(REFERENCE_DIR_ENV) or None,
        help="folder of the parity reference files that ExportReference writes and CompareReference reads, by "
        "name; two runners compared for parity must share it (default: $FWBENCH_REFERENCE_DIR, else a private "
        "temporary folder removed at exit)",
    )
    parser.add_argument(
        "--max-reference-bytes",
        type=int,
        default=DEFAULT_MAX_REFERENCE_BYTES,
        help=f"largest reference file written or read (default: {DEFAULT_MAX_REFERENCE_BYTES})",
    )


def folder_from_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ReferenceFolder:
    """The folder the flags name, or a private temporary one (mode 0700) removed when the process exits."""
    if args.max_reference_bytes < 1:
        parser.error("--max-reference-bytes must be at least 1")
    if args.reference_dir is None:
        temporary = tempfile.TemporaryDirectory(prefix="fwbench-references-")
        return ReferenceFolder(temporary.name, args.max_reference_bytes, temporary)
    if not os.path.isdir(args.reference_dir):
        parser.error(f"--reference-dir {args.reference_dir} is not a folder")
    what = system_folder(args.reference_dir)
    if what:
        parser.error(
            f"--reference-dir {args.reference_dir} is {what}: a runner writes its parity references there; "
            "give a folder of its own, e.g. results/references"
        )
    return ReferenceFolder(args.reference_dir, args.max_reference_bytes)
