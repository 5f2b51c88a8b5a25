"""PyTorch's data-parallel strategies: DistributedDataParallel over torch.distributed (NCCL on GPUs, gloo on
CPUs, the c10d TCP store at the job's rendezvous, as torchrun uses it) and DataParallel over one process's GPUs.

c10d's store has no authentication, and its own server listens on every interface whatever address it is given.
A job whose rendezvous is on loopback (a runner on its own always is; so are runners of one host named as
127.0.0.1 or localhost) hands rank 0's store a socket bound there instead, so that no other host can reach it;
across hosts the store listens on every interface of node 0 at the rendezvous port (docs/distributed.md)."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from fwbench_core.choices import Strategy
from fwbench_core.errors import Aborted, Unavailable
from fwbench_core.runs import RunConfig, WorkerPlace

from .network import choose_gloo_interface, loopback_listener


def join_process_group(config: RunConfig, device: torch.device) -> None:
    """Join the job's process group; a rendezvous that fails within distributed_timeout_s is Unavailable."""
    place = config.place
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        choose_gloo_interface(place.rendezvous, place.workers, config.cluster.node_rank if config.cluster else 0)
    timeout = timedelta(seconds=config.distributed_timeout_s)
    try:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            store=rendezvous_store(place, timeout),
            rank=place.rank,
            world_size=place.world_size,
            timeout=timeout,
        )
    except (RuntimeError, ValueError, OSError) as error:  # DistError is a RuntimeError; OSError: a taken port
        raise Unavailable(
            f"rendezvous at {place.rendezvous} failed within distributed_timeout_s ({config.distributed_timeout_s:g} s): "
            f"{first_line(error)}; is every runner of the job started and reachable?"
        ) from None


def rendezvous_store(place: WorkerPlace, timeout: timedelta) -> dist.TCPStore:
    """The job's c10d TCP store, as init_method="tcp://HOST:PORT" would make it: rank 0 hosts it, every rank
    connects, each waits for the others within `timeout`."""
    host, _, port = place.rendezvous.rpartition(":")
    listener = loopback_listener(place.rendezvous) if place.rank == 0 else None
    return dist.TCPStore(
        host.strip("[]"),
        int(port),
        place.world_size,
        is_master=place.rank == 0,
        timeout=timeout,
        master_listen_fd=listener.detach() if listener else None,  # the store owns and closes it
    )


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
    if isinstance(exc, dist.DistError) or any(
        word in text for word in ("gloo", "Connection closed", "NCCL", "Timed out")
    ):
        return Aborted(f"a collective failed: another rank of the job failed, left or stalled: {first_line(exc)}")
    return None


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
