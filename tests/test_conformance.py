"""The runner contract, checked over real gRPC on loopback, identically for every runner.

Each test takes the session's `runner`/`stub` fixtures, parametrized over the
fake runner and the real torch and TensorFlow runners. Shapes stay tiny so that
the whole suite runs in a few minutes on a small CPU machine.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from fwbench.runner.v1 import runner_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from support.processes import children
from support.runners import KERAS_RUNNERS, LARGER_MEMBERS, REAL_RUNNERS, RUNNER_PARAMS
from support.runners import SERVED_SPECS as MODEL_SPECS

from fwbench_aggregator.base import frameworks, vocabulary
from fwbench_aggregator.run import launch
from fwbench_core.wire import enum_to_wire

EXPECTED_MODELS = sorted(MODEL_SPECS)
PROTOCOL = "fwbench.runner.v1"
SERVICE = "fwbench.runner.v1.Runner"

BATCH = 2
SHAPE = [3, 32, 32]
WARMUP = 1
MEASURED = 3

RPC_TIMEOUT_S = 30
INSPECT_TIMEOUT_S = 300
RUN_TIMEOUT_S = 180
# The first of two runs on one device: long enough (~0.5 s on the fake runner)
# that it still holds the device when the second request arrives.
BUSY_STEPS = 50
# A run after a cancelled or failed one: queued forever if the device lock leaked.
PROMPT_TIMEOUT_S = 60


def small_shape(model: str) -> list[int]:
    """The model's minimum input, with sequences of 8 tokens so that attention has something to do."""
    spec = MODEL_SPECS[model]
    return [8] if spec.input_convention == "seq" else list(spec.min_input_shape)


def run_request(**overrides) -> pb.RunRequest:
    fields = dict(
        model="resnet18",
        mode=pb.MODE_INFER,
        batch_size=BATCH,
        input_shape=SHAPE,
        device=pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=0),
        warmup_steps=WARMUP,
        measured_steps=MEASURED,
        min_measure_s=0.0,  # the step count alone: the default second per run would make the suite slow
        seed=1,
    )
    fields.update(overrides)
    return pb.RunRequest(**{k: v for k, v in fields.items() if v is not None})


def run_events(stub, request: pb.RunRequest, timeout: float = RUN_TIMEOUT_S) -> list[pb.RunEvent]:
    return list(stub.Run(request, timeout=timeout))


def run_error(stub, request: pb.RunRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        run_events(stub, request)
    return info.value


def of_kind(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


def step_timings(events) -> list[pb.StepTiming]:
    return [s for batch in of_kind(events, "steps") for s in batch.steps]


def summary_of(events) -> pb.Summary:
    summaries = of_kind(events, "summary")
    assert len(summaries) == 1, f"expected one summary, got {len(summaries)}"
    assert events[-1].WhichOneof("event") == "summary", "the summary must be the last event"
    return summaries[0]


# --- the environments themselves -------------------------------------------


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", REAL_RUNNERS)
def test_runner_environment_exists(framework):
    # Fails (never skips) when CI forgot to build a runner's environment.
    try:
        command = launch.embedded_command(framework, launch.default_venvs())
    except launch.RunnerStartError as exc:
        command, missing = None, str(exc)
    if command is None:
        pytest.fail(missing, pytrace=False)
    assert command[1:3] == ["-m", frameworks.frameworks()[framework].module]


# --- Describe / ListModels --------------------------------------------------


def test_describe(runner, stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    assert info.framework == runner.name
    assert info.framework_version
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", info.python_version), info.python_version
    assert info.runner_version
    assert info.protocol == PROTOCOL
    cpus = [d for d in info.devices if d.kind == pb.DEVICE_KIND_CPU]
    assert cpus, f"no CPU device in {info.devices}"
    assert all(d.name for d in info.devices)
    assert pb.PRECISION_FP32 in info.precisions
    assert pb.PRECISION_UNSPECIFIED not in info.precisions
    # Which machine it runs on, so that a sweep never runs two runners on one device at once.
    assert info.options["host_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def served_models(runner: str) -> list[str]:
    """What the runner lists: every built-in, and each example plug-in with a builder for it (a Keras runner reads
    build_keras.py; the example decoder's generation is TensorFlow's own, so it has none)."""
    file = f"build_{'keras' if runner in KERAS_RUNNERS else runner}.py"
    return [
        name
        for name in EXPECTED_MODELS
        if runner == "fake"
        or MODEL_SPECS[name].source.built_in
        or (Path(MODEL_SPECS[name].source.folder) / file).is_file()
    ]


def test_list_models(runner, stub):
    models = stub.ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models
    assert [m.name for m in models] == served_models(runner.name)
    for m in models:
        spec = MODEL_SPECS[m.name]
        assert m.task == enum_to_wire(spec.task), m.name
        assert tuple(m.default_input_shape) == spec.default_input_shape, m.name
        assert tuple(m.min_input_shape) == spec.min_input_shape, m.name
        assert tuple(m.max_input_shape) == spec.max_input_shape, m.name
        assert m.input_convention == spec.input_convention, m.name
        assert [(o.name, list(o.choices), o.default) for o in m.options] == [
            (o.name, list(o.choices), o.default) for o in spec.options
        ], m.name


@functools.cache
def inspected_parameters(address: str, model: str) -> int:
    """A model's trainable parameters as the runner's InspectModel counts them, at the small shape the runs use."""
    with grpc.insecure_channel(address) as ch:
        request = pb.InspectRequest(model=model, input_shape=small_shape(model))
        report = pb_grpc.RunnerStub(ch).InspectModel(request, timeout=INSPECT_TIMEOUT_S)
    assert report.model == model and list(report.input_shape) == small_shape(model)
    return report.parameter_count


@pytest.mark.frameworks
def test_real_runners_list_the_same_models(runner_pool):
    for name in REAL_RUNNERS:
        with grpc.insecure_channel(runner_pool.get(name).address) as ch:
            models = pb_grpc.RunnerStub(ch).ListModels(pb.ListModelsRequest(), timeout=RPC_TIMEOUT_S).models
        assert sorted(m.name for m in models) == served_models(name), name


# That the real runners build networks of the same size (every model, every head, in every runner) is
# test_parity's: its parameter gap fails a builder of another network (a TensorFlow efficientnet_b0 built as B1:
# gap 0.32); counting them here too, at the small shapes, took 250 s of a CI run.


# --- a run, event by event ---------------------------------------------------


def _one_model_per_input_convention(preferred: tuple[str, ...] = ()) -> list[str]:
    """The first model of each input convention, those `preferred` first."""
    firsts: dict[str, str] = {}
    for name in (*(m for m in preferred if m in MODEL_SPECS), *EXPECTED_MODELS):
        firsts.setdefault(MODEL_SPECS[name].input_convention, name)
    return sorted(firsts.values())


# Where the larger member of a builder family trains (support.runners.LARGER_MEMBERS says why only there).
LARGER_MEMBERS_TRAIN_IN = ("fake", "torch")


# What a Keras runner trains here: its training step is Keras' one train_on_batch for every model, over the
# TensorFlow runner's definitions, which that runner trains model by model here (and tests/test_keras_backends.py runs
# every model's forward pass on each backend). So one image model, a token model, the CTC loss (wav2vec2_base) and
# the example plug-ins written once in Keras; the others train for 50-100 s each on JAX on a 2-core machine.
KERAS_TRAINED = ("resnet18", "tiny_cnn", "tiny_transformer", "wav2vec2_base")


def _run_cases() -> list:
    """Every model trains in every runner here (nothing else trains them all), LARGER_MEMBERS aside, and except in
    the Keras runners (KERAS_TRAINED). Inference runs one model per input convention: the run's inference loop is the
    same code for every model of a convention, and every model's forward pass runs in every runner in test_parity,
    which compares its outputs too. Each case keeps its runner's marks from RUNNER_PARAMS."""
    cases = []
    for runner in RUNNER_PARAMS:
        name, marks = (runner, ()) if isinstance(runner, str) else (runner.values[0], runner.marks)
        trained = [m for m in EXPECTED_MODELS if m not in LARGER_MEMBERS or name in LARGER_MEMBERS_TRAIN_IN]
        inferred = _one_model_per_input_convention()
        if name in KERAS_RUNNERS:
            # Inference of the models they train, where a convention has one: efficientnet_b0's XLA build on JAX
            # took 42 s of the 4 min of keras-jax's suite.
            trained, inferred = list(KERAS_TRAINED), _one_model_per_input_convention(KERAS_TRAINED)
        for mode, models in ((pb.MODE_TRAIN, trained), (pb.MODE_INFER, inferred)):
            label = "train" if mode == pb.MODE_TRAIN else "infer"
            cases += [pytest.param(name, model, mode, marks=marks, id=f"{model}-{label}-{name}") for model in models]
    return cases


def test_every_larger_member_has_its_family_member_train_in_every_runner():
    assert set(LARGER_MEMBERS) | set(LARGER_MEMBERS.values()) <= set(EXPECTED_MODELS)
    assert not set(LARGER_MEMBERS) & set(LARGER_MEMBERS.values())
    trained = {(case.values[0], case.values[1]) for case in _run_cases() if case.values[2] == pb.MODE_TRAIN}
    for name in ("fake", *REAL_RUNNERS):
        assert {(name, member) for member in LARGER_MEMBERS.values()} <= trained, name


@pytest.mark.parametrize("runner, model, mode", _run_cases(), indirect=["runner"])
def test_run_streams_config_steps_progress_and_summary(runner, stub, model, mode):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    # precision left unset: the runner must resolve it to fp32.
    shape = small_shape(model)
    events = run_events(stub, run_request(model=model, mode=mode, input_shape=shape))
    total = WARMUP + MEASURED

    # The resolved configuration, once, before any timing.
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds.count("config") == 1
    assert "steps" in kinds and kinds.index("config") < kinds.index("steps")
    config = of_kind(events, "config")[0]
    assert config.model == model
    assert config.mode == mode
    assert config.batch_size == BATCH
    assert list(config.input_shape) == shape
    assert config.precision == pb.PRECISION_FP32
    assert config.device.kind == pb.DEVICE_KIND_CPU and config.device.index == 0
    assert config.device.name
    assert (config.warmup_steps, config.measured_steps, config.seed) == (WARMUP, MEASURED, 1)
    assert config.framework == info.framework == runner.name
    assert config.framework_version == info.framework_version
    assert config.parameter_count > 0
    # A run counts its model's parameters as InspectModel does.
    assert config.parameter_count == inspected_parameters(runner.address, model)

    # Step timings: every index once, warm-up flagged, times positive and in order.
    steps = step_timings(events)
    assert sorted(s.index for s in steps) == list(range(total))
    assert [s.index for s in steps] == list(range(total)), "steps must stream in order"
    for s in steps:
        assert s.warmup == (s.index < WARMUP), s
        assert s.step_time_s > 0, s
        assert math.isfinite(s.step_time_s)
    for earlier, later in zip(steps, steps[1:]):
        assert later.start_s >= earlier.start_s + earlier.step_time_s - 1e-9, (earlier, later)

    # Progress: build first, phases in order, steps_done counting what was streamed, done last.
    progress_order = [pb.PHASE_BUILD, pb.PHASE_WARMUP, pb.PHASE_MEASURE, pb.PHASE_DONE]
    assert events[0].WhichOneof("event") == "progress" and events[0].progress.phase == pb.PHASE_BUILD
    streamed = 0
    phases = []
    for event in events:
        kind = event.WhichOneof("event")
        if kind == "steps":
            streamed += len(event.steps.steps)
        elif kind == "progress":
            p = event.progress
            assert p.steps_total == total, p
            assert p.phase in progress_order, p
            phases.append(p.phase)
            if p.phase != pb.PHASE_BUILD:
                assert p.steps_done == streamed, (p, streamed)
    assert phases == sorted(phases, key=progress_order.index), phases
    assert {pb.PHASE_WARMUP, pb.PHASE_MEASURE} <= set(phases)
    last_progress = of_kind(events, "progress")[-1]
    assert (last_progress.phase, last_progress.steps_done) == (pb.PHASE_DONE, total)

    # The summary is computed from exactly the streamed measured steps.
    summary = summary_of(events)
    measured = [s.step_time_s for s in steps if not s.warmup]
    assert len(measured) == MEASURED
    assert summary.measured_steps == MEASURED
    assert summary.median_step_time_s == statistics.median(measured)
    assert summary.mean_step_time_s == pytest.approx(statistics.fmean(measured), rel=1e-12)
    p95 = statistics.quantiles(measured, n=100, method="inclusive")[94]
    assert summary.p95_step_time_s == pytest.approx(p95, rel=1e-12)
    assert summary.throughput_samples_per_s == pytest.approx(BATCH * MEASURED / sum(measured), rel=1e-12)
    assert summary.time_to_first_step_s >= steps[0].step_time_s
    assert summary.peak_memory_source
    if summary.HasField("peak_memory_bytes"):
        assert summary.peak_memory_bytes > 0
    assert 0 < summary.started_at_unix_s <= summary.finished_at_unix_s


# --- errors -----------------------------------------------------------------


def test_unknown_model_is_not_found(runner, stub):
    error = run_error(stub, run_request(model="no_such_net"))
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    assert "no_such_net" in error.details()
    for name in served_models(runner.name):
        assert name in error.details()


def test_check_run_resolves_what_run_would_run_without_running_it(stub):
    request = run_request(measured_steps=1)
    started = time.monotonic()
    checked = stub.CheckRun(request, timeout=RPC_TIMEOUT_S)
    assert time.monotonic() - started < 5, "CheckRun builds nothing"
    config = of_kind(run_events(stub, request), "config")[0]
    # The same configuration a run resolves, less the parameter count, which needs a build.
    assert checked.parameter_count == 0 and config.parameter_count > 0
    config.parameter_count = 0
    assert checked == config


@pytest.mark.parametrize(
    "fields, code, says",
    [
        ({"model": "resnet81"}, grpc.StatusCode.NOT_FOUND, "unknown model 'resnet81' (did you mean resnet18?)"),
        (
            {"precision": pb.PRECISION_AMP_FP16},
            grpc.StatusCode.FAILED_PRECONDITION,
            "precision amp_fp16 is not supported",
        ),
        ({"batch_size": 0}, grpc.StatusCode.INVALID_ARGUMENT, "batch_size"),
    ],
)
def test_check_run_refuses_what_run_refuses_with_the_same_status(stub, fields, code, says):
    request = run_request(**fields)
    with pytest.raises(grpc.RpcError) as checked:
        stub.CheckRun(request, timeout=RPC_TIMEOUT_S)
    ran = run_error(stub, request)
    assert checked.value.code() == ran.code() == code, checked.value.details()
    assert checked.value.details() == ran.details() and says in ran.details()


def test_a_huge_model_name_is_not_found_in_a_message_of_bounded_length(runner, stub):
    # gRPC carries the message in a trailer: repeating a 100 KB name whole would turn NOT_FOUND into RESOURCE_EXHAUSTED.
    error = run_error(stub, run_request(model="../" * 34_000))
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
    assert "../../" in error.details() and "102000 characters" in error.details()
    assert len(error.details()) < 1000
    for name in served_models(runner.name):
        assert name in error.details()


@pytest.mark.parametrize("seed", [2**32, 2**64 - 1])
def test_a_seed_beyond_what_both_frameworks_honour_is_invalid(stub, seed):
    error = run_error(stub, run_request(seed=seed))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "seed must be between 0 and 4294967295" in error.details()


@pytest.mark.parametrize(
    "method, request_type, streaming",
    [("InspectModel", pb.InspectRequest, False), ("Run", pb.RunRequest, True)],
)
def test_a_model_name_that_is_not_utf8_is_invalid(channel, method, request_type, streaming):
    # Hand-encoded: field 1 (model, a string), length-delimited, 2 bytes that are not UTF-8.
    data = b"\x0a\x02\xff\xfe"
    path = f"/{SERVICE}/{method}"
    call = (channel.unary_stream if streaming else channel.unary_unary)(
        path, request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as info:
        response = call(data, timeout=RPC_TIMEOUT_S)
        if streaming:
            list(response)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "UTF-8" in info.value.details()
    assert request_type.FromString(data[:2] + b"ok").model == "ok", "the hand-encoding must be the model field"


@pytest.mark.parametrize("batch_size", [0, 70000])
def test_batch_size_out_of_range(stub, batch_size):
    error = run_error(stub, run_request(batch_size=batch_size))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    message = error.details()
    assert "batch_size" in message
    assert re.search(r"\b1\b.*\b65536\b", message), f"range not named: {message}"


def test_a_seed_past_every_frameworks_range_is_refused(stub):
    error = run_error(stub, run_request(seed=2**32))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "seed must be between 0 and 4294967295" in error.details()


@pytest.mark.parametrize("rpc", ["ExportReference", "CompareReference"])
@pytest.mark.parametrize(
    "fields, named",
    [
        ({"name": "../../../../tmp/x.npz"}, "name"),
        ({"name": "/tmp/x.npz"}, "name"),
        ({"name": "x"}, "name"),
        ({"name": "x.npz", "batch_size": 2**31}, "batch_size"),
        ({"name": "x.npz", "seed": 2**32}, "seed"),
    ],
)
def test_references_take_a_plain_name_and_a_small_batch(stub, rpc, fields, named):
    request = pb.ReferenceRequest(model="resnet18", input_shape=SHAPE, **fields)
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, rpc)(request, timeout=RPC_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert caught.value.details().startswith(named), caught.value.details()


@pytest.mark.parametrize(
    "shape", [[3, 32], [3, 16, 16], [4, 32, 32]], ids=["wrong-rank", "too-small", "wrong-channels"]
)
def test_bad_input_shape(stub, shape):
    error = run_error(stub, run_request(input_shape=shape))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    message = error.details()
    assert "input_shape" in message
    assert "x".join(map(str, shape)) in message
    # The accepted shapes: the convention, the minimum side and the default.
    assert "CxHxW" in message and "32" in message and "3x224x224" in message, message


def test_mode_unset(stub):
    error = run_error(stub, run_request(mode=pb.MODE_UNSPECIFIED))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "mode" in error.details() and "train, infer" in error.details()


def test_mode_unknown_number(stub):
    error = run_error(stub, run_request(mode=99))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "mode" in error.details() and "99" in error.details() and "train, infer" in error.details()


def test_amp_fp16_on_cpu_is_a_failed_precondition(stub):
    error = run_error(stub, run_request(precision=pb.PRECISION_AMP_FP16))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert "amp_fp16" in error.details() and "fp32" in error.details()


def test_missing_device_names_available_ones(stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    error = run_error(stub, run_request(device=pb.DeviceSelector(kind=pb.DEVICE_KIND_GPU, index=7)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    message = error.details()
    assert "gpu:7" in message
    for device in info.devices:
        kind = "cpu" if device.kind == pb.DEVICE_KIND_CPU else "gpu"
        assert f"{kind}:{device.index}" in message, message


def test_out_of_memory_then_a_normal_run(stub):
    huge = run_request(
        batch_size=65536, input_shape=[3, 4096, 4096], mode=pb.MODE_INFER, warmup_steps=0, measured_steps=1
    )
    error = run_error(stub, huge)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert "batch_size" in error.details()
    # The runner recovered: memory released, device lock free.
    events = run_events(stub, run_request(), timeout=PROMPT_TIMEOUT_S)
    assert summary_of(events).measured_steps == MEASURED


# --- serving scenarios ----------------------------------------------------------

# A small load each runner serves in a second or two on a small CPU: server's 30 queries support p50 and p90
# (5 and 29 queries needed) but not p99 (299).
SCENARIOS = {
    "single_stream": pb.Serving(scenario=pb.SCENARIO_SINGLE_STREAM, query_count=6),
    "server": pb.Serving(scenario=pb.SCENARIO_SERVER, target_qps=20.0, query_count=30, batch_timeout_ms=5.0),
    "offline": pb.Serving(scenario=pb.SCENARIO_OFFLINE, query_count=5),
}
PERCENTILES = {"p50_latency_s": 0.5, "p90_latency_s": 0.9, "p99_latency_s": 0.99}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_is_served_with_per_query_latencies_and_percentiles_the_queries_support(stub, scenario):
    asked = SCENARIOS[scenario]
    events = run_events(stub, run_request(serving=asked))
    config = of_kind(events, "config")[0]
    assert config.serving.scenario == asked.scenario and config.serving.query_count == asked.query_count
    batches = of_kind(events, "queries")
    assert [b.first_index for b in batches] == [sum(len(b.latency_s) for b in batches[:i]) for i in range(len(batches))]
    latency_s = [x for b in batches for x in b.latency_s]
    queue_s = [x for b in batches for x in b.queue_s]
    assert len(latency_s) == len(queue_s) == asked.query_count
    assert all(0.0 <= queued < latency for queued, latency in zip(queue_s, latency_s))
    served = summary_of(events).serving
    assert served.scenario == asked.scenario and served.query_count == asked.query_count
    assert served.achieved_qps == pytest.approx(asked.query_count / served.duration_s)
    samples = asked.query_count * (BATCH if scenario == "single_stream" else 1)
    assert served.throughput_samples_per_s == pytest.approx(samples / served.duration_s)
    assert served.mean_latency_s == pytest.approx(statistics.fmean(latency_s))
    assert max(latency_s) <= served.duration_s + 1e-9
    measured_steps = [s for s in step_timings(events) if not s.warmup]
    assert served.mean_batch_queries == pytest.approx(asked.query_count / len(measured_steps))
    assert 1.0 <= served.mean_batch_queries <= (1 if scenario == "single_stream" else BATCH)
    for field, quantile in PERCENTILES.items():
        supported = scenario != "offline" and asked.query_count >= math.ceil(math.log(0.05) / math.log(quantile))
        assert served.HasField(field) == supported, (field, dict(served.reasons))
        if supported:
            percentiles = statistics.quantiles(latency_s, n=100, method="inclusive")  # numpy's default
            assert getattr(served, field) == pytest.approx(percentiles[round(quantile * 100) - 1])
        else:
            assert served.reasons[field]


# --- sharing a device, cancelling --------------------------------------------


def test_runs_on_a_busy_device_queue_and_do_not_overlap(stub):
    # The first run is long enough to hold the device while the second arrives.
    first_request = run_request(model="resnet18", mode=pb.MODE_INFER, warmup_steps=1, measured_steps=BUSY_STEPS)
    second_request = run_request(model="resnet18", mode=pb.MODE_INFER)
    first_holds_device = threading.Event()
    results: dict[str, list] = {}
    errors: dict[str, BaseException] = {}

    def consume(key, request, on_first_event=None):
        try:
            events = []
            for event in stub.Run(request, timeout=RUN_TIMEOUT_S):
                events.append(event)
                if on_first_event is not None:
                    on_first_event.set()
            results[key] = events
        except BaseException as exc:  # reported below
            errors[key] = exc
        finally:
            first_holds_device.set()

    def second():
        first_holds_device.wait(RUN_TIMEOUT_S)
        consume("second", second_request)

    threads = [
        threading.Thread(target=consume, args=("first", first_request, first_holds_device)),
        threading.Thread(target=second),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RUN_TIMEOUT_S * 2)
    assert not any(t.is_alive() for t in threads), "a run never finished"
    assert not errors, errors
    first, second_events = results["first"], results["second"]

    def phases(events):
        return [p.phase for p in of_kind(events, "progress")]

    # The first event of the first run was its build: it held the device lock.
    assert phases(first)[0] == pb.PHASE_BUILD
    assert pb.PHASE_QUEUED not in phases(first)
    assert phases(second_events)[:2] == [pb.PHASE_QUEUED, pb.PHASE_BUILD], phases(second_events)
    a, b = summary_of(first), summary_of(second_events)
    assert a.measured_steps == BUSY_STEPS and b.measured_steps == MEASURED
    # [started_at, finished_at] windows: the queued run took the device only after the first let it go.
    windows = [(a.started_at_unix_s, a.finished_at_unix_s), (b.started_at_unix_s, b.finished_at_unix_s)]
    assert windows[0][1] <= windows[1][0], f"runs overlapped on the device: {windows}"


def test_cancelled_run_releases_the_device(stub):
    call = stub.Run(run_request(warmup_steps=1, measured_steps=100_000), timeout=RUN_TIMEOUT_S)
    saw_steps = False
    for event in call:
        if event.WhichOneof("event") == "steps":
            saw_steps = True
            call.cancel()
            break
    assert saw_steps, "the run ended before streaming any step timings"
    with pytest.raises(grpc.RpcError) as info:
        for _ in call:
            pass
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # If the cancelled run still held the device, this one would queue until its deadline.
    events = run_events(stub, run_request(), timeout=PROMPT_TIMEOUT_S)
    assert summary_of(events).measured_steps == MEASURED


# --- health and reflection ---------------------------------------------------


@pytest.mark.parametrize("service", ["", SERVICE])
def test_health_serving(channel, service):
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT_S
    )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_healthcheck_command_passes_against_a_serving_runner(runner):
    # The container HEALTHCHECK runs exactly this, with the listen address from the environment.
    port = runner.address.rsplit(":", 1)[1]
    done = subprocess.run(
        [sys.executable, "-m", "fwbench_core.healthcheck"],
        env={**os.environ, "FWBENCH_RUNNER_ADDRESS": f"0.0.0.0:{port}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "SERVING" in done.stdout


def test_reflection_lists_the_runner_service(channel):
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = list(
        reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=RPC_TIMEOUT_S
        )
    )
    assert len(replies) == 1
    names = [s.name for s in replies[0].list_services_response.service]
    assert SERVICE in names
    assert "grpc.health.v1.Health" in names


# --- explicit settings: what a runner advertises it honours, and refuses the rest -----

SETTINGS = {
    # Describe option suffix -> (RunRequest field, proto enum)
    "precisions": ("precision", pb.Precision),
    "layouts": ("layout", pb.Layout),
    "compilations": ("compilation", pb.Compilation),
    "cudnn_autotune": ("cudnn_autotune", pb.Switch),
}
# torch.compile takes a minute or more per model on a small CPU: checked by the benchmark, not here.
SLOW_SETTINGS = {("compilation", "torch_compile")}


def advertised(info: pb.DescribeResponse, suffix: str) -> set[str]:
    return set(info.options[f"cpu:0.{suffix}"].split(","))


@pytest.mark.parametrize("suffix", sorted(SETTINGS))
def test_advertised_settings_run_and_the_rest_are_refused(runner, stub, suffix):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    field, wrapper = SETTINGS[suffix]
    supported = advertised(info, suffix)
    assert supported, f"{runner.name} advertises no {suffix}"
    for value in vocabulary.choices(wrapper):
        if (field, value) in SLOW_SETTINGS:
            continue
        number = vocabulary.from_text(wrapper, value)
        # Inference where the compilation runs it (a compiled training step takes jax three times as long, and the
        # setting is checked the same); a compilation advertises the modes it runs.
        mode = "infer" if "infer" in info.options.get(f"cpu:0.{value}.modes", "infer") else "train"
        request = run_request(
            mode=vocabulary.from_text(pb.Mode, mode), warmup_steps=0, measured_steps=1, **{field: number}
        )
        if value in supported:
            config = of_kind(run_events(stub, request), "config")[0]
            assert getattr(config, field) == number, (field, value)
        else:
            error = run_error(stub, request)
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (value, error.details())
            assert f"{field} {value}" in error.details() and "supported there" in error.details()


def test_unset_settings_resolve_to_explicit_values(stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    config = of_kind(run_events(stub, run_request(measured_steps=1)), "config")[0]
    assert config.layout == pb.LAYOUT_CHANNELS_LAST
    assert vocabulary.to_text(pb.Compilation, config.compilation) == info.options["cpu:0.default_compilation"]
    assert config.cudnn_autotune == pb.SWITCH_OFF
    assert (config.intra_op_threads, config.inter_op_threads) == (
        int(info.options["intra_op_threads"]),
        int(info.options["inter_op_threads"]),
    )


def test_unset_windows_resolve_to_warmup_until_stable_and_a_second_of_measuring(stub):
    request = run_request(warmup_steps=None, min_measure_s=None, power_sample_rate_hz=0.0)
    events = run_events(stub, request)
    config = of_kind(events, "config")[0]
    assert config.warmup_steps == 50
    assert (config.warmup_until_stable.cv_threshold, config.warmup_until_stable.window) == (pytest.approx(0.05), 5)
    assert config.min_measure_s == 1.0
    summary = summary_of(events)
    assert summary.warmup_steps_run <= 50 and (summary.warmup_stable or summary.flags)
    assert sum(s.step_time_s for s in step_timings(events) if not s.warmup) >= 1.0


def test_a_cpu_run_records_the_device_and_host_state_around_it(stub):
    summary = summary_of(run_events(stub, run_request(measured_steps=1)))
    before, after = summary.device_before, summary.device_after
    assert before.HasField("load_avg_1m") and after.HasField("load_avg_1m")
    assert after.HasField("other_cpu_busy_cores") and after.other_cpu_busy_cores >= 0
    assert not before.HasField("other_cpu_busy_cores") and before.reasons["other_cpu_busy_cores"]
    assert not before.HasField("free_memory_bytes") and before.reasons["free_memory_bytes"] == "not a GPU"
    assert all(flag.startswith("host busy") for flag in summary.device_flags), summary.device_flags


def test_thread_counts_other_than_the_runners_are_refused_or_honoured(stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    other = int(info.options["inter_op_threads"]) + 1
    error = run_error(stub, run_request(inter_op_threads=other))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"--inter-op-threads {other}" in error.details()


def test_warmup_until_stable_and_minimum_duration(stub):
    request = run_request(
        warmup_steps=30,
        measured_steps=2,
        min_measure_s=0.05,
        warmup_until_stable=pb.WarmupUntilStable(cv_threshold=0.5, window=3),
    )
    events = run_events(stub, request)
    summary = of_kind(events, "summary")[0]
    assert 3 <= summary.warmup_steps_run <= 30
    assert summary.warmup_stable or summary.flags
    measured = [s for s in step_timings(events) if not s.warmup]
    assert len(measured) == summary.measured_steps >= 2
    assert sum(s.step_time_s for s in measured) >= 0.05


def test_a_batch_the_framework_cannot_train_is_a_clear_error_and_the_runner_goes_on(runner, stub):
    # One sample with a 1x1 final feature map: PyTorch's BatchNorm cannot normalise a single value.
    request = run_request(
        model="resnet18", mode=pb.MODE_TRAIN, batch_size=1, input_shape=[3, 32, 32], warmup_steps=0, measured_steps=1
    )
    try:
        events = run_events(stub, request)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert "batch_size" in error.details() and "input_shape" in error.details()
    else:
        assert of_kind(events, "summary")
    assert of_kind(run_events(stub, run_request(measured_steps=1)), "summary")


# --- distributed runs -------------------------------------------------------

TWO_CPUS = [pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=0), pb.DeviceSelector(kind=pb.DEVICE_KIND_CPU, index=1)]


def test_strategies_a_runner_does_not_advertise_are_refused_naming_those_it_supports(runner, stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    supported = advertised(info, "strategies")
    assert "single" in supported, f"{runner.name} advertises no single-device strategy"
    for value in sorted(set(vocabulary.choices(pb.Strategy)) - supported):
        request = run_request(device=None, devices=TWO_CPUS, strategy=vocabulary.from_text(pb.Strategy, value))
        error = run_error(stub, request)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (value, error.details())
        assert f"strategy {value} is not supported" in error.details() and "supports" in error.details()


def test_two_cpu_devices_run_the_runners_data_parallel_strategy_over_the_global_batch(runner, stub):
    info = stub.Describe(pb.DescribeRequest(), timeout=RPC_TIMEOUT_S)
    if advertised(info, "strategies") == {"single"}:
        # A runner with no data-parallel strategy (the Keras runners) refuses two devices, saying so.
        error = run_error(stub, run_request(device=None, devices=TWO_CPUS, mode=pb.MODE_TRAIN))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
        assert f"the {runner.name} runner supports none of its strategies for 2 CPU devices" in error.details()
        return
    events = run_events(stub, run_request(device=None, devices=TWO_CPUS, mode=pb.MODE_TRAIN, warmup_steps=1))
    config = of_kind(events, "config")[0]
    assert vocabulary.to_text(pb.Strategy, config.strategy) in advertised(info, "strategies") - {"single"}
    assert (config.world_size, config.global_batch_size) == (2, 2 * BATCH)
    assert [(d.kind, d.index) for d in config.devices] == [(pb.DEVICE_KIND_CPU, 0), (pb.DEVICE_KIND_CPU, 1)]
    summary = of_kind(events, "summary")[0]
    measured = [s.step_time_s for s in step_timings(events) if not s.warmup]
    assert summary.measured_steps == len(measured) == MEASURED
    assert summary.throughput_samples_per_s == pytest.approx(2 * BATCH * len(measured) / sum(measured), rel=1e-6)


def test_a_device_named_twice_is_invalid(stub):
    error = run_error(stub, run_request(device=None, devices=[TWO_CPUS[0], TWO_CPUS[0]]))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "names cpu:0 twice" in error.details()


# --- a sweep's shared build ---------------------------------------------------


def test_a_reuse_chain_builds_once_and_its_last_run_frees_the_build(runner, stub):
    key = f"conformance-{runner.name}"

    def summary(batch_size: int, **fields) -> pb.Summary:
        events = run_events(stub, run_request(batch_size=batch_size, reuse_key=key, **fields))
        assert of_kind(events, "config")[0].batch_size == batch_size
        return summary_of(events)

    first, last = summary(BATCH), summary(2 * BATCH, end_reuse=True)
    assert (first.build_reused, last.build_reused) == (False, True)
    # A new batch size traces the step again exactly where a fresh build would.
    assert last.first_step_traced == first.first_step_traced
    # The chain's last run freed the build: the same key starts from a fresh one.
    assert summary(BATCH, end_reuse=True).build_reused is False


def block_workers(pid: int) -> set[int]:
    """The worker processes runner `pid` has spawned and that still live."""
    return set(children(pid, b"spawn_main"))


def test_an_opened_block_runs_its_windows_in_the_worker_it_started_and_its_last_window_ends_it(runner, stub):
    block = f"conformance-open-{runner.name}"
    before = block_workers(runner.pid)
    assert stub.OpenBlock(pb.OpenBlockRequest(process_block=block), timeout=RUN_TIMEOUT_S).ready_s > 0
    opened = block_workers(runner.pid) - before
    assert len(opened) == 1
    window = functools.partial(run_request, process_block=block, reuse_key=block, continue_reuse=True)
    first, last = summary_of(run_events(stub, window())), summary_of(run_events(stub, window(end_reuse=True)))
    assert {first.process_id, last.process_id} == opened and (first.build_continued, last.build_continued) == (
        False,
        True,
    )
    assert not block_workers(runner.pid) & opened


@pytest.mark.parametrize("block, says", [("", "process_block is empty"), ("\x00", "printable ASCII")])
def test_opening_a_block_without_a_plain_name_is_invalid_naming_the_field(stub, block, says):
    with pytest.raises(grpc.RpcError) as info:
        stub.OpenBlock(pb.OpenBlockRequest(process_block=block), timeout=RPC_TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in info.value.details()
