"""The aggregator's vocabulary comes from the contract: every enum value round-trips through its text,
unknown text names the accepted values, and one RunSpec writes every field of a run request."""

from __future__ import annotations

import pytest
from fwbench.runner.v1 import runner_pb2 as pb

from fwbench_aggregator.base import vocabulary
from fwbench_aggregator.plan.spec import RunSpec, option_pairs
from fwbench_aggregator.run import wire
from fwbench_aggregator.run.launch import StartupSettings

PROTO_ENUMS = [pb.DESCRIPTOR.enum_types_by_name[name] for name in sorted(pb.DESCRIPTOR.enum_types_by_name)]


@pytest.mark.parametrize("descriptor", PROTO_ENUMS, ids=lambda d: d.name)
def test_every_value_of_every_enum_round_trips_through_its_text(descriptor):
    wrapper = getattr(pb, descriptor.name)
    texts = vocabulary.choices(wrapper)
    assert len(texts) == len(descriptor.values) - 1  # all but the zero value
    for value in descriptor.values:
        text = vocabulary.to_text(wrapper, value.number)
        assert text == text.lower() and value.name.endswith(text.upper())
        if value.number == 0:
            assert text == "unspecified" and text not in texts
            with pytest.raises(vocabulary.UnknownValue):
                vocabulary.from_text(wrapper, text)
        else:
            assert vocabulary.from_text(wrapper, text) == value.number


def test_known_texts():
    assert vocabulary.choices(pb.Mode) == ("train", "infer", "generate")
    assert vocabulary.to_text(pb.DeviceKind, pb.DEVICE_KIND_GPU) == "gpu"
    assert vocabulary.from_text(pb.Compilation, "torch_compile") == pb.COMPILATION_TORCH_COMPILE


@pytest.mark.parametrize("text", ["fp8", "FP32", "PRECISION_FP32", "", None])
def test_unknown_text_names_the_accepted_values(text):
    with pytest.raises(
        vocabulary.UnknownValue, match=r"^unknown precision .*; accepted values: fp32, tf32, amp_fp16, amp_bf16$"
    ):
        vocabulary.from_text(pb.Precision, text)


def test_unknown_number_names_the_accepted_values():
    with pytest.raises(vocabulary.UnknownValue, match="99 is not a device kind .*accepted values: cpu, gpu"):
        vocabulary.to_text(pb.DeviceKind, 99)


@pytest.mark.parametrize(
    "wrapper, choice_enum",
    [
        (pb.Mode, vocabulary.Mode),
        (pb.Precision, vocabulary.Precision),
        (pb.Layout, vocabulary.Layout),
        (pb.Compilation, vocabulary.Compilation),
        (pb.Switch, vocabulary.Switch),
    ],
)
def test_option_enums_are_the_contract_choices(wrapper, choice_enum):
    assert [member.value for member in choice_enum] == list(vocabulary.choices(wrapper))
    assert all(member.name == member.value == member for member in choice_enum)


@pytest.mark.parametrize(
    "text, accepted",
    [
        ("3x224x224", True),
        ("seq=128", True),
        ("0x3", False),
        ("3x", False),
        ("seq:1", False),
        # The wire carries each side as a uint32.
        ("3x4294967295", True),
        ("3x4294967296", False),
        ("seq=4294967296", False),
    ],
)
def test_shape_rule(text, accepted):
    assert vocabulary.is_shape(text) is accepted


@pytest.mark.parametrize(
    "text, accepted",
    [
        ("cpu", True),
        ("cpu:0", True),
        ("gpu", True),
        ("gpu:3", True),
        ("cpu:1", False),
        ("cuda", False),
        ("gpu:4294967295", True),
        ("gpu:4294967296", False),
    ],
)
def test_device_rule(text, accepted):
    assert vocabulary.is_device(text) is accepted


def test_shapes_and_devices_as_the_contract_writes_them():
    assert vocabulary.shape_dims("seq=128") == [128] and vocabulary.shape_dims("3x32x32") == [3, 32, 32]
    assert vocabulary.shape_text([3, 32, 32]) == "3x32x32"
    assert vocabulary.device_kind_index("gpu") == (pb.DEVICE_KIND_GPU, 0)
    assert vocabulary.device_text(pb.DeviceSelector(kind=pb.DEVICE_KIND_GPU, index=2)) == "gpu:2"


def test_run_spec_writes_every_setting_into_the_request():
    spec = RunSpec(
        "bert_base",
        vocabulary.Mode.infer,
        4,
        "seq=16",
        vocabulary.Precision.amp_bf16,
        "gpu:1",
        vocabulary.Layout.channels_first,
        vocabulary.Compilation.xla,
        warmup=6,
        steps=7,
        seed=11,
        model_options=option_pairs(["head=mlm"]),
        startup=StartupSettings(2, 1, "on"),
        warmup_until_cv=0.05,
        stable_window=4,
        min_measure_s=1.5,
        power_rate_hz=0.0,
        idle_baseline_s=2.0,
    )
    request = wire.to_request(spec)
    assert request == pb.RunRequest(
        model="bert_base",
        mode=pb.MODE_INFER,
        batch_size=4,
        input_shape=[16],
        precision=pb.PRECISION_AMP_BF16,
        device=pb.DeviceSelector(kind=pb.DEVICE_KIND_GPU, index=1),
        warmup_steps=6,
        measured_steps=7,
        seed=11,
        model_options={"head": "mlm"},
        layout=pb.LAYOUT_CHANNELS_FIRST,
        compilation=pb.COMPILATION_XLA,
        cudnn_autotune=pb.SWITCH_ON,
        intra_op_threads=2,
        inter_op_threads=1,
        warmup_until_stable=pb.WarmupUntilStable(cv_threshold=0.05, window=4),
        min_measure_s=1.5,
        power_sample_rate_hz=0.0,
        idle_baseline_s=2.0,
    )
    assert request.HasField("power_sample_rate_hz")


def test_run_spec_leaves_unset_settings_to_the_runner():
    request = wire.to_request(RunSpec("resnet18"))
    # The measurement window is always explicit (the aggregator's defaults); the rest may be left unset.
    for name in ("device", "power_sample_rate_hz", "idle_baseline_s"):
        assert not request.HasField(name), name
    assert request.layout == pb.LAYOUT_UNSPECIFIED and request.compilation == pb.COMPILATION_UNSPECIFIED


def test_fewer_warmup_steps_than_the_stability_window_are_a_fixed_count():
    assert not wire.to_request(RunSpec("resnet18", warmup=2)).HasField("warmup_until_stable")
    assert not wire.to_request(RunSpec("resnet18", warmup_until_cv=0)).HasField("warmup_until_stable")
    defaults = wire.to_request(RunSpec("resnet18"))
    assert defaults.warmup_steps == 50 and defaults.warmup_until_stable.cv_threshold == 0.05
    assert defaults.min_measure_s == 1.0 and defaults.measured_steps == 20
