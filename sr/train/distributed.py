"""The training processes: one on a CPU or GPU, or K under ``torchrun`` (DDP; gloo on CPU, nccl on CUDA).

Rank 0 is the main process: only it validates, logs and writes checkpoints.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..inference.devices import resolve_device, usable_cpus
from .config import TrainConfig


@dataclass(frozen=True)
class Processes:
    """This process's place among the training processes, and its device."""

    world: int
    rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def cpu_threads(requested: int, world: int) -> int:
    """Intra-op threads per training process: ``requested``, else the usable CPUs (affinity and
    container limits, not os.cpu_count's whole machine) shared among the ``world`` processes."""
    return requested or max(1, usable_cpus() // world)


def set_up_processes(cfg: TrainConfig) -> Processes:
    """This process's rank, world and device (torchrun's, under DDP: its process group joined), and
    its threads (CPU) or cuDNN autotuning (CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = resolve_device(cfg.device)
    if world > 1:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda" and local >= torch.cuda.device_count():
            raise ValueError(
                f"torchrun's process {local} has no GPU of its own ({torch.cuda.device_count()} CUDA "
                "device(s) here): use --nproc_per_node up to that number, or --device cpu"
            )
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend)
        if device.type == "cuda":
            device = torch.device("cuda", local)
            torch.cuda.set_device(device)
    if device.type == "cpu":
        torch.set_num_threads(cpu_threads(cfg.threads, world))
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed patch shapes: tune each conv once
    return Processes(world, rank, device)


def training_hardware(device: torch.device, world: int = 1) -> str:
    """What this run trains on, for the exported metadata: e.g. 'NVIDIA H200 x1' or 'x86_64 CPU x2'."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} x{world}"
    host = platform.processor() or platform.machine()
    return f"{host} CPU x{torch.get_num_threads() * world}"


def wrap(model: torch.nn.Module, processes: Processes) -> torch.nn.Module:
    """What the forward runs: ``model`` itself, or under DDP its wrapper (gradients all-reduced)."""
    if processes.world == 1:
        return model
    device = processes.device
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


def agree_to_stop(processes: Processes, timed_out: bool, stop_requested: bool) -> tuple[bool, bool]:
    """(timed out, stop requested) on any rank, for every rank.

    Ranks see the clock and signals at different steps; one leaving the loop alone would leave the
    others waiting in the next gradient all-reduce, so under DDP a stop on any rank is a stop on all
    (one tiny all-reduce per step, beside the gradients' own).
    """
    if processes.world == 1:
        return timed_out, stop_requested
    flags = torch.tensor([float(timed_out), float(stop_requested)], device=processes.device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags[0]), bool(flags[1])


def meet(processes: Processes) -> None:
    """Wait for every rank (before tearing the group down)."""
    if processes.world > 1:
        # tearing gloo down while the other rank is still saving aborted a rank now and then
        # (SIGABRT, "terminate called without an active exception"); meet first, then destroy
        dist.barrier()


def leave(processes: Processes) -> None:
    """Leave the process group (DDP only)."""
    if processes.world > 1:
        dist.destroy_process_group()
