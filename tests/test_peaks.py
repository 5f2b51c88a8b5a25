"""The peak table: GPU names as NVML and torch report them map to the vendor's dense peaks."""

import pytest
from fwbench.runner.v1 import runner_pb2 as pb

from fwbench_aggregator.analyse.peaks import PRECISIONS, peak_flops
from fwbench_aggregator.base.vocabulary import choices

T = 1e12


@pytest.mark.parametrize(
    ("device_name", "entry"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL"),
        ("NVIDIA H200", "NVIDIA H200 SXM"),
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100"),
        ("NVIDIA L4", "NVIDIA L4"),
        ("NVIDIA L40S", "NVIDIA L40S"),
        ("NVIDIA L40", "NVIDIA L40"),
        ("NVIDIA A10", "NVIDIA A10"),
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"),
        ("Tesla V100-SXM2-32GB", "NVIDIA V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "NVIDIA V100S PCIe"),
        ("Tesla T4", "NVIDIA T4"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"),
        ("  nvidia  h100 80gb hbm3 ", "NVIDIA H100 SXM"),  # case and spacing do not matter
    ],
)
def test_known_gpus_map_to_their_row(device_name, entry):
    assert peak_flops(device_name, "fp32").entry == f"{entry}, fp32 non-tensor"


@pytest.mark.parametrize(
    ("device_name", "precision", "tflops"),
    [
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156),
        ("NVIDIA A100-SXM4-80GB", "amp_fp16", 312),
        ("NVIDIA A100-SXM4-80GB", "amp_bf16", 312),
        ("NVIDIA H100 80GB HBM3", "fp32", 67),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.5),
        ("NVIDIA H100 80GB HBM3", "amp_bf16", 989.5),
        ("NVIDIA H100 80GB HBM3", "amp_fp16", 989.5),
        ("Tesla V100-SXM2-16GB", "amp_fp16", 125),
        ("Tesla T4", "amp_fp16", 65),
    ],
)
def test_reference_figures(device_name, precision, tflops):
    peak = peak_flops(device_name, precision)
    assert peak.flops_per_s == pytest.approx(tflops * T)
    assert "datasheet" in peak.source or "whitepaper" in peak.source


def test_the_entry_names_the_precision():
    assert peak_flops("NVIDIA H100 80GB HBM3", "amp_bf16").entry == "NVIDIA H100 SXM, bf16 dense"


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA A10G",  # no NVIDIA datasheet
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GH200 480GB",
        "Tesla V100-SXM3-32GB",
        "NVIDIA B200",
        "",
        "cpu",
        "Intel(R) Xeon(R) CPU @ 2.20GHz",
        "AMD EPYC 7B13 64-Core Processor",
    ],
)
def test_unknown_gpus_and_cpus_have_no_peak(device_name):
    assert peak_flops(device_name, "fp32") is None


@pytest.mark.parametrize("device_name", ["Tesla V100-SXM2-16GB", "Tesla T4"])
def test_no_bf16_or_tf32_without_their_tensor_cores(device_name):
    assert peak_flops(device_name, "amp_bf16") is None
    assert peak_flops(device_name, "tf32") is None


def test_every_precision_of_the_contract_has_a_column():
    assert set(PRECISIONS) == set(choices(pb.Precision))


def test_an_unknown_precision_names_the_accepted_ones():
    with pytest.raises(ValueError, match="fp64.*fp32, tf32, amp_fp16, amp_bf16"):
        peak_flops("NVIDIA A100-SXM4-80GB", "fp64")
