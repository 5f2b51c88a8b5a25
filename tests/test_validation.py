"""Resolving a run request: defaults, ranges, refusals that name what is accepted."""

from __future__ import annotations

import re

import pytest
from fwbench.runner.v1 import runner_pb2 as pb
from support.core import ALL_MODELS, CPU, GPU0, capabilities_with, expect_error, request, resolve_request

from fwbench_core import wire
from fwbench_core.builtin import MODEL_SPECS
from fwbench_core.catalog import Catalog
from fwbench_core.choices import Compilation, DeviceKind, Layout, Mode, Objective, Precision, Profile, Strategy, Switch
from fwbench_core.devices import CompilationLimits, Device, DeviceRef, RunnerInfo
from fwbench_core.errors import ECHO_CHARS, FailedPrecondition, InvalidArgument, NotFound, echoed
from fwbench_core.model_resolution import resolve_model_config
from fwbench_core.models import Head
from fwbench_core.runs import RunRequest, WarmupUntilStable


def test_defaults_are_resolved():
    config = resolve_request(request())
    assert config.model is MODEL_SPECS["resnet18"]
    assert config.precision is Precision.FP32
    assert config.warmup_steps == 50  # a cap: warm-up runs until the step time is stable
    assert config.warmup_until_stable == WarmupUntilStable(cv_threshold=0.05, window=5)
    assert config.measured_steps == 20
    assert config.min_measure_s == pytest.approx(1.1)  # power is sampled: an energy window and its margin
    assert config.input_shape == (3, 224, 224)
    assert config.device == CPU
    assert config.mode is Mode.TRAIN and config.batch_size == 2


def test_default_device_is_the_first_gpu_where_there_is_one():
    gpu1 = Device(DeviceRef(DeviceKind.GPU, 1), "Other GPU")
    assert resolve_request(request(), devices=(CPU, GPU0, gpu1)).device == GPU0


def test_explicit_values_are_kept():
    config = resolve_request(
        request(
            input_shape=(3, 64, 48),
            precision=Precision.TF32,
            device=DeviceRef(DeviceKind.GPU, 0),
            warmup_steps=0,
            measured_steps=1,
            seed=7,
        ),
        devices=(CPU, GPU0),
        precisions=lambda d: frozenset({Precision.FP32, Precision.TF32}),
    )
    assert config.input_shape == (3, 64, 48)
    assert config.precision is Precision.TF32
    assert config.device == GPU0
    # 0 warm-up steps is a choice, not "unset".
    assert (config.warmup_steps, config.measured_steps, config.seed) == (0, 1, 7)


def test_unknown_model_lists_known_models():
    message = expect_error(NotFound, request(model="vgg99"))
    assert "vgg99" in message
    for name in MODEL_SPECS:
        assert name in message


def test_a_declared_model_this_runner_does_not_build_says_why():
    catalog = Catalog(
        {"mobilenet_v2": MODEL_SPECS["mobilenet_v2"]}, {"resnet18": "plug-in /m/resnet18 has no build_test.py"}
    )
    message = expect_error(FailedPrecondition, request(model="resnet18"), models=catalog)
    assert "'resnet18' is not served by this runner: plug-in /m/resnet18 has no build_test.py" in message


def test_model_options_default_and_choice():
    assert resolve_request(request(model="bert_base", input_shape=())).model_options == {"head": "classification"}
    config = resolve_request(request(model="bert_base", input_shape=(16,), model_options={"head": "mlm"}))
    assert config.model_options == {"head": "mlm"}
    assert config.head == Head(Objective.TOKEN_CE, 30522)
    assert resolve_request(request(model="resnet18")).model_options == {}


def test_unknown_model_option_names_the_accepted_ones():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(), model_options={"heads": "mlm"}))
    assert "model_options" in message and "'heads'" in message and "head" in message
    message = expect_error(InvalidArgument, request(model="resnet18", model_options={"head": "mlm"}))
    assert "model_options" in message and "none" in message


def test_bad_model_option_value_names_the_accepted_values():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(), model_options={"head": "qa"}))
    assert "head='qa'" in message and "classification, mlm" in message


def test_sequence_longer_than_the_model_takes_is_refused():
    message = expect_error(InvalidArgument, request(model="bert_base", input_shape=(513,)))
    assert "input_shape 513" in message and "1<=seq<=512" in message


def test_wire_request_carries_model_options():
    req = wire.run_request_from_wire(
        pb.RunRequest(model="bert_base", mode=pb.MODE_TRAIN, batch_size=1, model_options={"head": "mlm"})
    )
    assert req.model_options == {"head": "mlm"}


def test_mode_must_be_set():
    message = expect_error(InvalidArgument, request(mode=None))
    assert "mode" in message and "train, infer" in message


@pytest.mark.parametrize("batch_size", [0, 65537, 70000])
def test_batch_size_range(batch_size):
    message = expect_error(InvalidArgument, request(batch_size=batch_size))
    assert "batch_size" in message and "1" in message and "65536" in message and str(batch_size) in message


@pytest.mark.parametrize("batch_size", [1, 65536])
def test_batch_size_bounds_are_accepted(batch_size):
    assert resolve_request(request(batch_size=batch_size)).batch_size == batch_size


@pytest.mark.parametrize(
    "shape",
    [(3, 32), (3, 32, 32, 1), (3, 31, 32), (3, 32, 16), (1, 32, 32), (3, 4097, 32)],
    ids=["rank-2", "rank-4", "height-small", "width-small", "channels", "too-large"],
)
def test_input_shape_errors_name_the_accepted_shapes(shape):
    message = expect_error(InvalidArgument, request(input_shape=shape))
    assert "input_shape" in message and "x".join(map(str, shape)) in message
    assert MODEL_SPECS["resnet18"].describe_accepted_shapes() in message
    assert "C=3" in message and "32<=H<=4096" in message and "default 3x224x224" in message


@pytest.mark.parametrize("shape", [(3, 32, 32), (3, 4096, 4096), (3, 33, 500)])
def test_input_shape_bounds_are_accepted(shape):
    assert resolve_request(request(input_shape=shape)).input_shape == shape


def test_missing_device_names_available_devices():
    message = expect_error(FailedPrecondition, request(device=DeviceRef(DeviceKind.GPU, 7)), devices=(CPU, GPU0))
    assert "gpu:7" in message and "available devices: cpu:0, gpu:0" in message


def test_unsupported_precision_names_supported_ones():
    message = expect_error(
        FailedPrecondition,
        request(precision=Precision.AMP_FP16, device=DeviceRef(DeviceKind.CPU)),
        precisions=lambda d: frozenset({Precision.FP32, Precision.TF32}),
    )
    assert (
        "precision amp_fp16" in message and "cpu:0" in message and "fp32, tf32" in message and "test runner" in message
    )


@pytest.mark.parametrize(
    "field, value, bounds",
    [
        ("warmup_steps", 10_001, ("0", "10000")),
        ("measured_steps", 0, ("1", "1000000")),
        ("measured_steps", 1_000_001, ("1", "1000000")),
    ],
)
def test_step_count_ranges(field, value, bounds):
    message = expect_error(InvalidArgument, request(**{field: value}))
    assert field in message and all(b in message for b in bounds)


def test_wire_request_with_unknown_enum_number_is_invalid():
    with pytest.raises(InvalidArgument, match=r"precision has unknown value 42; accepted values: fp32, tf32"):
        wire.run_request_from_wire(pb.RunRequest(model="resnet18", mode=pb.MODE_TRAIN, batch_size=1, precision=42))


def test_wire_request_optional_fields():
    unset = wire.run_request_from_wire(pb.RunRequest(model="resnet18", mode=pb.MODE_INFER, batch_size=3))
    assert unset == RunRequest("resnet18", Mode.INFER, 3)
    zero = wire.run_request_from_wire(
        pb.RunRequest(
            model="resnet18",
            mode=pb.MODE_TRAIN,
            batch_size=3,
            input_shape=[3, 40, 40],
            precision=pb.PRECISION_TF32,
            device=pb.DeviceSelector(kind=pb.DEVICE_KIND_GPU, index=2),
            warmup_steps=0,
            measured_steps=0,
            seed=9,
        )
    )
    assert zero == RunRequest(
        "resnet18", Mode.TRAIN, 3, (3, 40, 40), Precision.TF32, DeviceRef(DeviceKind.GPU, 2), 0, 0, 9
    )
    # An unset device kind is the runner's default device.
    default_device = wire.run_request_from_wire(
        pb.RunRequest(model="resnet18", mode=pb.MODE_TRAIN, batch_size=1, device=pb.DeviceSelector(index=3))
    )
    assert default_device.device is None


def test_settings_defaults_are_explicit():
    config = resolve_request(request())
    assert config.layout is Layout.CHANNELS_LAST
    assert config.compilation is Compilation.GRAPH  # the capabilities' default
    assert config.cudnn_autotune is Switch.OFF
    assert (config.intra_op_threads, config.inter_op_threads) == (2, 2)
    assert resolve_request(request(model="bert_base", input_shape=(16,))).layout is None


def test_the_native_profile_takes_the_frameworks_own_layout_and_equal_the_same_for_every_runner():
    both = dict(layouts=frozenset(Layout), native_layout=Layout.CHANNELS_FIRST)
    assert resolve_request(request(), **both).layout is Layout.CHANNELS_LAST
    assert resolve_request(request(profile=Profile.EQUAL), **both).profile is Profile.EQUAL
    native = resolve_request(request(profile=Profile.NATIVE), **both)
    assert (native.layout, native.profile, native.compilation) == (
        Layout.CHANNELS_FIRST,
        Profile.NATIVE,
        Compilation.GRAPH,
    )
    # A setting the request names is used under either profile; a layout the device lacks gives way.
    assert (
        resolve_request(request(profile=Profile.NATIVE, layout=Layout.CHANNELS_LAST), **both).layout
        is Layout.CHANNELS_LAST
    )
    assert (
        resolve_request(request(profile=Profile.NATIVE), native_layout=Layout.CHANNELS_FIRST).layout
        is Layout.CHANNELS_LAST
    )


def test_native_and_best_take_the_frameworks_own_cudnn_autotuning_where_the_runner_can_set_it():
    gpu = dict(cudnn_autotune=frozenset(Switch), native_cudnn_autotune=Switch.ON)
    assert resolve_request(request(), **gpu).cudnn_autotune is Switch.OFF
    for profile in (Profile.NATIVE, Profile.BEST):
        assert resolve_request(request(profile=profile), **gpu).cudnn_autotune is Switch.ON
        assert resolve_request(request(profile=profile, cudnn_autotune=Switch.OFF), **gpu).cudnn_autotune is Switch.OFF
    # A runner that fixed autotuning at start-up (TensorFlow, JAX) runs native at that setting, not refused.
    fixed = dict(cudnn_autotune=frozenset({Switch.OFF}), native_cudnn_autotune=Switch.ON)
    assert resolve_request(request(profile=Profile.NATIVE), **fixed).cudnn_autotune is Switch.OFF


def test_layout_is_for_image_models_only():
    message = expect_error(InvalidArgument, request(model="lstm_lm", input_shape=(8,), layout=Layout.CHANNELS_LAST))
    assert "layout" in message and "image models" in message and "lstm_lm" in message


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("layout", Layout.CHANNELS_FIRST, "supported there: channels_last"),
        ("compilation", Compilation.XLA, "supported there: eager, graph"),
        ("cudnn_autotune", Switch.ON, "supported there: off"),
    ],
)
def test_a_setting_the_runner_cannot_honour_is_refused(field, value, named):
    message = expect_error(FailedPrecondition, request(**{field: value}))
    assert f"{field} {value.value}" in message and named in message and "test runner" in message


def test_thread_counts_fixed_at_start_up_are_refused_when_they_differ():
    assert resolve_request(request(intra_op_threads=2, inter_op_threads=2)).intra_op_threads == 2
    message = expect_error(FailedPrecondition, request(inter_op_threads=4))
    assert "inter_op_threads 4" in message and "--inter-op-threads 4" in message
    adjustable = resolve_request(request(intra_op_threads=1), intra_op_threads_adjustable=True)
    assert adjustable.intra_op_threads == 1


def test_warmup_until_stable_needs_a_cap_at_least_its_window():
    message = expect_error(InvalidArgument, request(warmup_steps=3, warmup_until_stable=WarmupUntilStable(0.05, 5)))
    assert "warmup_steps (3)" in message and "window (5)" in message
    message = expect_error(InvalidArgument, request(warmup_until_stable=WarmupUntilStable(1.5, 5)))
    assert "cv_threshold" in message


def test_power_sample_rate_out_of_range_names_the_field():
    message = expect_error(InvalidArgument, request(power_sample_rate_hz=500.0))
    assert "power_sample_rate_hz" in message and "100" in message and "0 turns telemetry off" in message


def test_seeds_are_those_both_frameworks_honour():
    assert resolve_request(request(seed=2**32 - 1)).seed == 2**32 - 1
    message = expect_error(InvalidArgument, request(seed=2**32))
    assert "seed" in message and "0" in message and "4294967295" in message


def test_inspection_and_parity_configs_take_the_same_seed_and_batch_rules():
    config = resolve_model_config("resnet18", (), {}, ALL_MODELS, batch_size=2, seed=2**32 - 1)
    assert (config.batch_size, config.seed) == (2, 2**32 - 1)
    with pytest.raises(InvalidArgument, match=r"seed must be between 0 and 4294967295"):
        resolve_model_config("resnet18", (), {}, ALL_MODELS, batch_size=2, seed=2**32)
    with pytest.raises(InvalidArgument, match=r"batch_size must be between 1 and 65536"):
        resolve_model_config("resnet18", (), {}, ALL_MODELS, batch_size=2**32 - 1, seed=0)


@pytest.mark.parametrize(
    "error, overrides, echoed_as",
    [
        (NotFound, {"model": "x" * 100_000}, "unknown model 'xxx"),
        (
            InvalidArgument,
            {"model": "bert_base", "input_shape": (), "model_options": {"h" * 100_000: "mlm"}},
            "model_options has 'hhh",
        ),
        (
            InvalidArgument,
            {"model": "bert_base", "input_shape": (), "model_options": {"head": "m" * 100_000}},
            "head='mmm",
        ),
        (InvalidArgument, {"input_shape": (3,) * 100_000}, "input_shape 3x3x3"),
    ],
    ids=["model", "option-name", "option-value", "input-shape"],
)
def test_a_huge_request_field_is_echoed_cut(error, overrides, echoed_as):
    message = expect_error(error, request(**overrides))
    assert echoed_as in message and re.search(r"\.\.\. \(\d+ characters\)", message), message
    assert len(message) < 1000, len(message)


def test_echoed_text_is_quoted_and_cut():
    assert echoed("resnet9000") == "'resnet9000'"
    assert echoed("a\nb") == "'a\\nb'"
    assert echoed("3x224", quote=False) == "3x224"
    long = echoed("y" * (ECHO_CHARS + 1))
    assert long == repr("y" * ECHO_CHARS) + f"... ({ECHO_CHARS + 1} characters)"


# --- compilations that run less than their device (torch's onnxruntime: inference, fp32, NCHW, one device) ---

INFER_FP32_NCHW = CompilationLimits(
    modes=frozenset({Mode.INFER}),
    precisions=frozenset({Precision.FP32}),
    layouts=frozenset({Layout.CHANNELS_FIRST}),
    strategies=frozenset({Strategy.SINGLE}),
)
LIMITED = dict(
    compilations=frozenset({Compilation.EAGER, Compilation.ONNXRUNTIME}),
    default_compilation=Compilation.EAGER,
    layouts=frozenset(Layout),
    compilation_limits={Compilation.ONNXRUNTIME: INFER_FP32_NCHW},
)


def test_a_compilation_for_inference_only_refuses_training_naming_the_compilations_that_train():
    message = expect_error(InvalidArgument, request(mode=Mode.TRAIN, compilation=Compilation.ONNXRUNTIME), **LIMITED)
    assert message.startswith("compilation onnxruntime runs mode infer only, not mode train")
    assert message.endswith("compilations for mode train on the test runner: eager")


def test_a_precision_the_compilation_cannot_run_is_refused_naming_those_it_can():
    precisions = lambda device: frozenset({Precision.FP32, Precision.AMP_BF16})
    message = expect_error(
        FailedPrecondition,
        request(mode=Mode.INFER, compilation=Compilation.ONNXRUNTIME, precision=Precision.AMP_BF16),
        precisions=precisions,
        **LIMITED,
    )
    assert message == (
        "precision amp_bf16 is not supported with compilation onnxruntime by the test runner; supported with it: fp32"
    )


def test_an_unset_layout_gives_way_to_one_the_compilation_takes_and_an_explicit_one_is_refused():
    config = resolve_request(request(mode=Mode.INFER, compilation=Compilation.ONNXRUNTIME), **LIMITED)
    assert config.layout is Layout.CHANNELS_FIRST
    assert resolve_request(request(mode=Mode.INFER), **LIMITED).layout is Layout.CHANNELS_LAST
    message = expect_error(
        FailedPrecondition,
        request(mode=Mode.INFER, compilation=Compilation.ONNXRUNTIME, layout=Layout.CHANNELS_LAST),
        **LIMITED,
    )
    assert "layout channels_last is not supported with compilation onnxruntime" in message
    assert message.endswith("supported with it: channels_first")


def test_compilation_limits_are_advertised_per_device():
    options = wire._capabilities_as_options(
        RunnerInfo("test", "1", "3.11", (CPU,)),
        capabilities_with(lambda device: frozenset({Precision.FP32}), **LIMITED),
    )
    assert options["cpu:0.onnxruntime.modes"] == "infer"
    assert options["cpu:0.onnxruntime.layouts"] == "channels_first"
    assert "cpu:0.eager.modes" not in options
