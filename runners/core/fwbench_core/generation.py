"""Generation (Mode.GENERATE): a step is one request, a batch of prompts prefilled into a key-value cache and then
decoded a token at a time, each token chosen greedily. The request is timed in parts: the prefill up to its first
tokens (time to first token) and every decode step (a token for every prompt), each until the device finished it.
Waiting for the device after every token costs a little on a GPU; it is what a per-token latency is, and every
runner pays it alike."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .backend import Workload
from .catalog import Catalog
from .choices import Mode, Strategy
from .errors import InvalidArgument
from .limits import MAX_NEW_TOKENS, MIN_NEW_TOKENS, in_range
from .models import ModelSpec
from .runs import RunRequest

DEFAULT_NEW_TOKENS = 32


def resolve_new_tokens(
    request: RunRequest, mode: Mode, spec: ModelSpec, input_shape: tuple[int, ...], catalog: Catalog
) -> int | None:
    """The tokens each prompt gains under Mode.GENERATE (None in any other mode); InvalidArgument naming the field
    where the model does not generate or prompt and new tokens pass its longest sequence."""
    if mode is not Mode.GENERATE:
        if request.new_tokens is not None:
            raise InvalidArgument(f"new_tokens applies to mode generate only; this run's mode is {mode.value}")
        return None
    if not spec.generates:
        decoders = [name for name in catalog.names() if catalog.spec(name).generates]
        raise InvalidArgument(
            f"mode generate: {spec.name} does not generate (it declares no key-value cache decoding); models that "
            f"do: {', '.join(decoders) or 'none'}"
        )
    new_tokens = in_range(
        "new_tokens",
        DEFAULT_NEW_TOKENS if request.new_tokens is None else request.new_tokens,
        MIN_NEW_TOKENS,
        MAX_NEW_TOKENS,
    )
    longest = spec.max_input_shape[0]
    if input_shape[0] + new_tokens > longest:
        raise InvalidArgument(
            f"new_tokens {new_tokens} after a prompt of seq={input_shape[0]} makes {input_shape[0] + new_tokens} "
            f"tokens; {spec.name} takes at most {longest}: shorten the prompt or ask fewer new tokens"
        )
    return new_tokens


def refuse_unsupported(mode: Mode, strategy: Strategy) -> None:
    """What generation does not run under, refused by name."""
    if mode is Mode.GENERATE and strategy is not Strategy.SINGLE:
        raise InvalidArgument(
            f"mode generate runs on one device (strategy single), not strategy {strategy.value}: data-parallel "
            "generation is not offered"
        )


@dataclass(frozen=True)
class RequestTimes:
    """One generation request: when it started and ended on the timing clock, its time to first token and each
    decode step's latency."""

    start_s: float
    end_s: float
    time_to_first_token_s: float
    token_latency_s: tuple[float, ...]

    @property
    def decode_time_s(self) -> float:
        return self.end_s - self.start_s - self.time_to_first_token_s


def run_request(workload: Workload, new_tokens: int, clock: Callable[[], float]) -> RequestTimes:
    start_s = clock()
    workload.prefill()
    workload.synchronize()
    first_s = last_s = clock()
    latencies = []
    for _ in range(new_tokens - 1):
        workload.decode_step()
        workload.synchronize()
        now_s = clock()
        latencies.append(now_s - last_s)
        last_s = now_s
    return RequestTimes(start_s, last_s, first_s - start_s, tuple(latencies))


@dataclass(frozen=True)
class GenerationSummary:
    new_tokens: int
    prompt_tokens: int
    median_time_to_first_token_s: float
    p90_time_to_first_token_s: float
    median_token_latency_s: float
    p90_token_latency_s: float
    p99_token_latency_s: float
    decode_tokens_per_s: float  # batch x (new_tokens - 1) x requests over their decode time
    median_request_latency_s: float
    first_prompt_tokens: tuple[int, ...]  # the last request's tokens for its first prompt
    tokens_sha256: str  # over every prompt's tokens of the last request


def tokens_fingerprint(tokens: Sequence[Sequence[int]]) -> str:
    """A SHA-256 of every prompt's generated tokens, in order: runners that generated the same text agree on it."""
    digest = hashlib.sha256()
    for row in tokens:
        digest.update(",".join(str(int(token)) for token in row).encode())
        digest.update(b";")
    return digest.hexdigest()


def _percentile(values: Sequence[float], pct: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def summarize_generation(
    requests: Sequence[RequestTimes],
    batch_size: int,
    prompt_tokens: int,
    new_tokens: int,
    tokens: Sequence[Sequence[int]],
) -> GenerationSummary:
    """The figures of a run's measured requests; `tokens` are the last request's, per prompt."""
    first = [r.time_to_first_token_s for r in requests]
    latencies = [latency for r in requests for latency in r.token_latency_s]
    decode_s = sum(r.decode_time_s for r in requests)
    return GenerationSummary(
        new_tokens=new_tokens,
        prompt_tokens=prompt_tokens,
        median_time_to_first_token_s=statistics.median(first),
        p90_time_to_first_token_s=_percentile(first, 90),
        median_token_latency_s=statistics.median(latencies),
        p90_token_latency_s=_percentile(latencies, 90),
        p99_token_latency_s=_percentile(latencies, 99),
        decode_tokens_per_s=batch_size * (new_tokens - 1) * len(requests) / decode_s if decode_s > 0 else 0.0,
        median_request_latency_s=statistics.median(r.end_s - r.start_s for r in requests),
        first_prompt_tokens=tuple(int(t) for t in tokens[0]) if tokens else (),
        tokens_sha256=tokens_fingerprint(tokens),
    )
