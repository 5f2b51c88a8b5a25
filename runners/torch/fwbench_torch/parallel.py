"""PyTorch's data-parallel strategies: DistributedDataParallel over torch.distributed (NCCL on GPUs, gloo on
CPUs, the c10d TCP store at the job's rendezvous, as torchrun uses it) and DataParallel over one process's GPUs."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from fwbench_core.errors import Aborted, Unavailable
from fwbench_core.spec import RunConfig, Strategy

from .network import choose_gloo_interface


def join_process_group(config: RunConfig, device: torch.device) -> None:
    """Join the job's process group; a rendezvous that fails within distributed_timeout_s is Unavailable."""
    place = config.place
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        choose_gloo_interface(place.rendezvous, place.workers, config.cluster.node_rank if config.cluster else 0)
    try:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            init_method=f"tcp://{place.rendezvous}",
            rank=place.rank,
            world_size=place.world_size,
            timeout=timedelta(seconds=config.distributed_timeout_s),
        )
    except (RuntimeError, ValueError) as error:  # torch.distributed's DistError is a RuntimeError
        raise Unavailable(
            f"rendezvous at {place.rendezvous} failed within distributed_timeout_s ({config.distributed_timeout_s:g} s): "
            f"{first_line(error)}; is every runner of the job started and reachable?"
        ) from None


def wrap(model: torch.nn.Module, config: RunConfig, device: torch.device) -> torch.nn.Module:
    """The model as the strategy runs it: DDP replicas synchronise gradients in backward; DataParallel
    scatters each batch over the run's GPUs and gathers the outputs."""
    if config.strategy is Strategy.DDP:
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    if config.strategy is Strategy.DP:
        return torch.nn.DataParallel(model, device_ids=[d.ref.index for d in config.process_devices])
    return model


def all_sum(votes: tuple[int, ...], device: torch.device) -> tuple[int, ...]:
    """Every rank's votes summed (NCCL reduces on the GPU, gloo on the CPU)."""
    tensor = torch.tensor(votes, dtype=torch.int64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tuple(int(vote) for vote in tensor.tolist())


def leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def peer_failure(exc: BaseException) -> Aborted | None:
    """A collective that failed because another rank died, left or timed out, as the run's error."""
    if not dist.is_initialized() or not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if isinstance(exc, dist.DistError) or any(word in text for word in ("gloo", "Connection closed", "NCCL", "Timed out")):
        return Aborted(f"a collective failed: another rank of the job failed, left or stalled: {first_line(exc)}")
    return None


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
