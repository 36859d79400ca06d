"""Data parallelism under ``torchrun`` / ``accelerate launch`` (``WORLD_SIZE`` > 1), and the CPU
thread choice every training process makes.

Every process draws its own batch from its own slice of each group; gradients are averaged after
each backward pass; rank 0 evaluates and writes. With one process every method is a no-op.
"""

from __future__ import annotations

import os

import torch

from laya_protocol.errors import cause


class Distributed:
    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        # The flags the loop agrees on travel as tensors on the backend's device: NCCL takes CUDA ones only.
        self.device = torch.device("cpu")
        if self.world > 1 and device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", "0"))
            torch.cuda.set_device(local)  # so "cuda" means this process's own GPU
            self.device = torch.device("cuda", local)
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def average_gradients(self, params) -> None:
        if self.world == 1:
            return
        for p in params:
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad)
                p.grad /= self.world

    def any(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any (so all stop at the same step)."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        torch.distributed.all_reduce(t)
        return bool(t.item())

    def agree(self, model) -> bool:
        """Whether every process holds the same weights (they must, after every step)."""
        if self.world == 1:
            return True
        digest = torch.tensor(
            [float(sum(p.double().sum() for p in model.parameters()))], dtype=torch.float64, device=self.device
        )
        all_ = [torch.zeros_like(digest) for _ in range(self.world)]
        torch.distributed.all_gather(all_, digest)
        return all(torch.equal(a, all_[0]) for a in all_)


def set_threads(threads: int | None, device: str) -> int:
    """Fix torch's intra-op threads and return the number chosen.

    On a CPU the default is one thread per process. torch's own default (one per core) makes its
    OpenMP threads spin against any other busy process: measured on two cores, a training step took
    5.5 s median with the default against 0.31 s with one thread while another process ran. One
    thread leaves the second core to the frame-decoding thread and to whatever else the machine does.
    On a GPU the host threads matter little; the default leaves torch's choice alone.
    """
    if threads is None:
        if device.startswith("cuda"):
            return torch.get_num_threads()
        threads = 1
    if threads < 1:
        raise ValueError(f"--threads {threads}: expected 1 or more")
    torch.set_num_threads(threads)
    return threads


def check_device(device: str) -> None:
    """``--device`` names a device torch knows and this machine has; refused before any work."""
    try:
        kind = torch.device(device).type
    except RuntimeError as e:
        raise ValueError(f"--device {device}: {cause(e, 120)}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: this machine has no CUDA device torch can use")
