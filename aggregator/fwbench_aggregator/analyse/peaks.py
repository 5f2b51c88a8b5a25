"""Vendors' peak throughput per GPU and precision: the denominator of model FLOP utilisation (MFU).

Every figure is the vendor's published dense peak (without 2:4 structured sparsity, which datasheets mark
with an asterisk and which dense training never uses), in FLOP/s, per precision as fwbench names it:
  fp32      strict FP32, tensor cores off: the FP32 (non-tensor) peak
  tf32      the TF32 tensor-core peak
  amp_fp16  the FP16 tensor-core peak, with FP32 accumulation where the vendor gives two (GeForce)
  amp_bf16  the BF16 tensor-core peak; none on GPUs without BF16 tensor cores (V100, T4)

To add a GPU: one _Gpu row, its pattern matching the name NVML and torch.cuda.get_device_name report
(`fwbench describe` shows it), placed before any row whose pattern would also match it, its figures in
TFLOP/s copied from the datasheet named in `source` (halve figures given only with sparsity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA = 1e12

# Datasheets, one per family.
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100); sparse figures halved"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200); sparse figures halved"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100)"
_L4 = "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4); sparse figures halved"
_L40 = "NVIDIA L40 and L40S datasheets (nvidia.com/en-us/data-center/l40, /l40s)"
_A10 = "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/products/a10-gpu)"
_V100 = "NVIDIA Tesla V100 datasheet (nvidia.com/en-us/data-center/v100); Volta has no TF32 or BF16 tensor cores"
_T4 = "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4); Turing has no TF32 or BF16 tensor cores"
_ADA = "NVIDIA Ada GPU architecture whitepaper, appendix (GeForce RTX 4090); FP16 with FP32 accumulate"
_GA102 = "NVIDIA Ampere GA102 GPU architecture whitepaper, appendix (GeForce RTX 3090); FP16 with FP32 accumulate"


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    entry: str  # the table row matched and the precision, e.g. "NVIDIA H100 SXM, bf16 dense"
    source: str


@dataclass(frozen=True)
class _Gpu:
    pattern: str  # searched case-insensitively in the device name
    name: str
    fp32_tflops: float
    tf32_tflops: float | None
    fp16_tflops: float
    bf16_tflops: float | None
    source: str


# Most specific first: the first row whose pattern matches the name is the GPU.
_TABLE = (
    _Gpu(r"\bh100\b.*\bnvl\b", "NVIDIA H100 NVL", 60, 417.5, 835.5, 835.5, _H100),
    _Gpu(r"\bh100\b.*\bpcie\b", "NVIDIA H100 PCIe", 51, 378, 756.5, 756.5, _H100),
    # NVML names the SXM5 board by its memory: "NVIDIA H100 80GB HBM3".
    _Gpu(r"\bh100\b.*\b(sxm\d*|hbm3)\b", "NVIDIA H100 SXM", 67, 494.5, 989.5, 989.5, _H100),
    _Gpu(r"\bh200\b.*\bnvl\b", "NVIDIA H200 NVL", 60, 417.5, 835.5, 835.5, _H200),
    _Gpu(r"\bh200\b", "NVIDIA H200 SXM", 67, 494.5, 989.5, 989.5, _H200),
    # SXM4 and PCIe, 40 and 80 GB: the same peaks.
    _Gpu(r"\ba100\b", "NVIDIA A100", 19.5, 156, 312, 312, _A100),
    _Gpu(r"\bl40s\b", "NVIDIA L40S", 91.6, 183, 362.05, 362.05, _L40),
    _Gpu(r"\bl40\b", "NVIDIA L40", 90.5, 90.5, 181.05, 181.05, _L40),
    _Gpu(r"\bl4\b", "NVIDIA L4", 30.3, 60, 121, 121, _L4),
    # Not the A10G (AWS's variant): NVIDIA publishes no datasheet for it, so it has no row.
    _Gpu(r"\ba10\b", "NVIDIA A10", 31.2, 62.5, 125, 125, _A10),
    _Gpu(r"\bv100s\b", "NVIDIA V100S PCIe", 16.4, None, 130, None, _V100),
    _Gpu(r"\bv100-pcie\b", "NVIDIA V100 PCIe", 14, None, 112, None, _V100),
    _Gpu(r"\bv100-sxm2\b", "NVIDIA V100 SXM2", 15.7, None, 125, None, _V100),
    _Gpu(r"\bt4\b", "NVIDIA T4", 8.1, None, 65, None, _T4),
    # Anchored at the end: not the 4090 D, nor a laptop's "RTX 4090 Laptop GPU".
    _Gpu(r"\brtx 4090$", "NVIDIA GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2, _ADA),
    _Gpu(r"\brtx 3090$", "NVIDIA GeForce RTX 3090", 35.6, 35.6, 71, 71, _GA102),
)

# Each precision: the _Gpu field holding its peak, and how the entry names it.
PRECISIONS = {
    "fp32": ("fp32_tflops", "fp32 non-tensor"),
    "tf32": ("tf32_tflops", "tf32 dense"),
    "amp_fp16": ("fp16_tflops", "fp16 dense"),
    "amp_bf16": ("bf16_tflops", "bf16 dense"),
}


def peak_flops(device_name: str, precision: str) -> Peak | None:
    """The vendor's dense peak for this GPU (as NVML or torch name it) and precision; None for a CPU, an
    unknown GPU, or a precision the GPU has no tensor cores for. Raises ValueError for an unknown precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    name = " ".join(device_name.lower().split())
    gpu = next((g for g in _TABLE if re.search(g.pattern, name)), None)
    if gpu is None:
        return None
    field, label = PRECISIONS[precision]
    tflops = getattr(gpu, field)
    if tflops is None:
        return None
    return Peak(tflops * TERA, f"{gpu.name}, {label}", gpu.source)
