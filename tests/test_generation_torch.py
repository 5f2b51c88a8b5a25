"""The torch runner's generation (Mode.GENERATE): from its static key-value cache, eager and torch.compile'd, both
decoders generate exactly the greedy tokens of generating without a cache, request after request, after a reuse
at another batch size, and in a reference's export; under autocast the cache is in autocast's dtype; TorchScript,
whose forward takes no caches, is refused; it serves generation under a scenario. The conformance suite's
generation tests cover the rest over gRPC."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from support.requests import refusal

from fwbench_aggregator.run import launch

# Every test here runs the torch runner or its environment.
pytestmark = pytest.mark.frameworks

HERE = Path(__file__).resolve().parent
# torch's start, gpt2_small's builds and passes on a loaded 2-core CPU, or torch.compile's first compilation.
CHECK_TIMEOUT_S = 600


def check(*arguments: str) -> dict:
    python = launch.default_venvs() / "torch" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(HERE / "torch_generation_equals_uncached.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


# gpt2_small has no tiny size: torch.compile's compilation of it takes minutes on a small CPU, so it is compiled
# for llama_small alone; the two share the cache and the generation code.
@pytest.mark.parametrize(
    ("model", "compilation"),
    [("gpt2_small", "eager"), ("llama_small", "eager"), ("llama_small", "torch_compile")],
)
def test_cached_generation_gives_the_tokens_of_generating_without_a_cache(model, compilation):
    result = check(model, compilation)
    assert result["cache_dtype"] == "torch.float32"
    assert result["first_request"] and result["second_request"] and result["exported"], result
    if compilation == "eager":  # a compiled workload is not reused (it would compile for the new batch size)
        assert result["reused"], result


def test_under_autocast_the_cache_is_in_its_dtype():
    result = check("llama_small", "eager", "amp_bf16")
    assert result["cache_dtype"] == "torch.bfloat16"
    assert result["same_twice"] and {len(tokens) for tokens in result["tokens"]} == {result["new_tokens"]}, result


def test_torchscript_is_refused_naming_the_compilations_that_generate(runner_pool):
    with grpc.insecure_channel(runner_pool.get("torch").address) as channel:
        error = refusal(
            pb_grpc.RunnerStub(channel),
            model="gpt2_small",
            mode=pb.MODE_GENERATE,
            input_shape=[8],
            new_tokens=4,
            compilation=pb.COMPILATION_TORCHSCRIPT,
        )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "compilations for mode generate on the torch runner: eager, torch_compile" in error.details(), (
        error.details()
    )


def test_the_torch_runner_serves_generation_under_the_server_scenario(runner_pool):
    """A tiny llama_small under Poisson arrivals, batched by two: every query's first token latency is streamed and
    lies between its wait and its latency; the summary has the percentiles 6 queries support and the tokens served."""
    serving = pb.Serving(scenario=pb.SCENARIO_SERVER, target_qps=20, query_count=6, batch_timeout_ms=20, arrival_seed=3)
    with grpc.insecure_channel(runner_pool.get("torch").address) as channel:
        events = list(
            pb_grpc.RunnerStub(channel).Run(
                pb.RunRequest(
                    model="llama_small",
                    model_options={"size": "tiny"},
                    mode=pb.MODE_GENERATE,
                    input_shape=[8],
                    new_tokens=4,
                    batch_size=2,
                    warmup_steps=1,
                    min_measure_s=0.0,
                    seed=1,
                    serving=serving,
                ),
                timeout=CHECK_TIMEOUT_S,
            )
        )
    queries = [e.queries for e in events if e.WhichOneof("event") == "queries"]
    latency = [x for q in queries for x in q.latency_s]
    queue = [x for q in queries for x in q.queue_s]
    first_token = [x for q in queries for x in q.first_token_latency_s]
    assert len(latency) == len(first_token) == 6
    assert all(wait < first < last for wait, first, last in zip(queue, first_token, latency))
    summary = events[-1].summary
    served = summary.serving
    assert served.query_count == 6 and served.HasField("p50_first_token_latency_s")
    assert 0 < served.p50_time_per_output_token_s < served.p50_latency_s
    assert not served.HasField("p90_first_token_latency_s") and "p90_first_token_latency_s" in served.reasons
    assert abs(served.generated_tokens_per_s - 6 * 4 / served.duration_s) < 1e-6 * served.generated_tokens_per_s
    assert summary.generation.new_tokens == 4 and summary.generation.median_time_to_first_token_s > 0
