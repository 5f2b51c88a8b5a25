"""Generation (MODE_GENERATE) by the runner contract, over real gRPC on loopback, identically for every runner: each
model that declares it generates prefills a batch of prompts, decodes exactly new_tokens tokens each, and reports
its time to first token, per-token latency and decode throughput consistently; requests generation cannot serve are
refused naming the field."""

from __future__ import annotations

import math

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.runners import KERAS_RUNNERS, RUNNER_PARAMS
from test_conformance import RPC_TIMEOUT_S, of_kind, run_error, run_events, run_request, step_timings, summary_of

PROMPT = 8
NEW_TOKENS = 4
TINY_OPTIONS = {"llama_small": {"size": "tiny"}}


# The runners that generate: every one but the Keras runners, which refuse it (the last test).
GENERATING = [r for r in RUNNER_PARAMS if (r if isinstance(r, str) else r.values[0]) not in KERAS_RUNNERS]


@pytest.fixture(scope="session", params=GENERATING)
def runner(request, runner_pool):
    """This module's runners: those that generate."""
    return runner_pool.get(request.param)


def decoders(stub) -> list[str]:
    listed = stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models
    return [model.name for model in listed if model.generates]


def generate_request(model: str, **overrides) -> pb.RunRequest:
    fields = dict(
        model=model,
        mode=pb.MODE_GENERATE,
        input_shape=[PROMPT],
        new_tokens=NEW_TOKENS,
        model_options=TINY_OPTIONS.get(model, {}),
        measured_steps=2,
    )
    fields.update(overrides)
    return run_request(**fields)


def test_every_decoder_generates_exactly_the_new_tokens_with_consistent_figures(stub):
    names = decoders(stub)
    assert "gpt2_small" in names
    for model in names:
        events = run_events(stub, generate_request(model))
        config = of_kind(events, "config")[0]
        assert (config.mode, config.new_tokens) == (pb.MODE_GENERATE, NEW_TOKENS)
        summary = summary_of(events)
        generation = summary.generation
        assert (generation.new_tokens, generation.prompt_tokens) == (NEW_TOKENS, PROMPT)
        assert len(generation.first_prompt_tokens) == NEW_TOKENS and len(generation.tokens_sha256) == 64
        measured = [s for s in step_timings(events) if not s.warmup]
        assert len(measured) == summary.measured_steps >= 2
        for step in measured:
            assert step.HasField("time_to_first_token_s") and step.HasField("decode_time_s")
            assert math.isclose(step.time_to_first_token_s + step.decode_time_s, step.step_time_s, rel_tol=1e-6)
        decode_s = sum(s.decode_time_s for s in measured)
        tokens = run_request().batch_size * (NEW_TOKENS - 1) * len(measured)
        assert math.isclose(generation.decode_tokens_per_s, tokens / decode_s, rel_tol=1e-6), model
        assert generation.median_time_to_first_token_s <= generation.p90_time_to_first_token_s
        assert 0 < generation.median_token_latency_s <= generation.p90_token_latency_s <= generation.p99_token_latency_s
        assert math.isclose(generation.median_request_latency_s, summary.median_step_time_s, rel_tol=1e-6)


def test_the_same_request_generates_the_same_tokens(stub):
    model = decoders(stub)[0]
    first, again = (summary_of(run_events(stub, generate_request(model))).generation for _ in range(2))
    assert first.tokens_sha256 == again.tokens_sha256 and list(first.first_prompt_tokens) == list(
        again.first_prompt_tokens
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"model": "resnet18", "input_shape": [3, 32, 32]}, "resnet18 does not generate"),
        ({"new_tokens": 0}, "new_tokens must be between 2 and 4096"),
        ({"input_shape": [1020], "new_tokens": 8}, "gpt2_small takes at most 1024"),
        ({"mode": pb.MODE_INFER}, "new_tokens applies to mode generate only"),
    ],
)
def test_what_generation_cannot_run_is_refused_naming_the_field(stub, fields, says):
    error = run_error(stub, generate_request(**{"model": "gpt2_small", **fields}))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and says in error.details(), error.details()


@pytest.mark.frameworks
@pytest.mark.parametrize("name", KERAS_RUNNERS)
def test_a_keras_runner_refuses_generation_naming_the_runners_that_generate(runner_pool, name):
    with grpc.insecure_channel(runner_pool.get(name).address) as channel:
        error = run_error(pb_grpc.RunnerStub(channel), generate_request("gpt2_small"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert f"the {name} runner does not generate" in error.details() and "native runners" in error.details()
