"""What each training step reads: which examples (a pure function of seed, step and rank), their
screens resized once and kept (a byte-capped cache), and the next batch prepared while this one trains.

Measured on two cores before this module (tiny preset, 128 px): decoding two PNGs and resizing
them took about a quarter of a step. Screens are decoded and resized the first time a batch needs
them and kept as the resized uint8 the tower's normalisation starts from, so every later pass costs
a lookup; the result is exactly what resizing again would give.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from laya_policy.data import Example
from laya_policy.imageprep import ImagePrep

#: Kept screens are allocated this many bytes at a time: above glibc's largest mmap threshold
#: (32 MiB), so each block is mapped on its own and freed memory is never trapped between them.
BLOCK_BYTES = 64 * 2**20
#: Decoded frames held and resized at a time (one larger frame alone): resized a batch at once, as
#: floats, frames of 4000x4000 (which a meta.json may declare) took training to 10 GB.
RESIZE_BYTES = 64 * 2**20


def draw(groups: dict[str, list[Example]], batch: int, seed: int, step: int, rank: int = 0) -> list[Example]:
    """The batch of ``step``: a group uniformly, then a record of it, ``batch`` times; drawn from
    (seed, step, rank) alone, so a resumed run draws what the uninterrupted one would have."""
    rng = random.Random((seed * 1_000_003 + step) * 64 + rank)
    keys = list(groups)
    return [rng.choice(groups[k]) for k in (rng.choice(keys) for _ in range(batch))]


class ScreenCache:
    """Examples' screens as the tower's input ``[n * frames, 3, S, S]`` (oldest first in each example),
    each screen resized once on the device (on a GPU, kept in GPU memory) until ``budget_mb`` is
    full; after that the rest are resized whenever they are needed, and nothing is evicted. Which
    screens are kept can vary with timing (training's prefetch thread and evaluation share it),
    never what is returned. The processor path (SmolVLM's own, a reference) is not cached.

    Kept screens are copied into blocks of :data:`BLOCK_BYTES`, allocated as needed and never more
    than the budget. One small allocation per screen, made on the prefetch thread between the
    resize's large temporaries, left glibc holding the temporaries' freed memory: the quickstart's
    training grew past 24 GB of RSS on a 2 GB budget."""

    def __init__(self, prep: ImagePrep, frames: int, budget_mb: float = 2048.0):
        self.prep, self.frames = prep, frames
        self.budget = int(budget_mb * 2**20) if prep.mode == "gpu" else 0
        self.used = 0
        self._kept: dict[Hashable, torch.Tensor] = {}  # views into the blocks
        self._blocks: list[torch.Tensor] = []
        self._filled = 0  # screens in the last block
        self.hits = self.misses = 0
        self._lock = threading.Lock()  # the prefetch thread and evaluation share it

    def __call__(self, examples: list[Example]) -> torch.Tensor:
        with self._lock:
            return self._pixels(examples)

    def _pixels(self, examples: list[Example]) -> torch.Tensor:
        if self.prep.mode != "gpu":  # the processor path, SmolVLM's own (a reference): whole, every time
            return self.prep(_raw(examples, self.frames))
        keys = [k for ex in examples for k in ex.frame_keys(self.frames)]
        missing = sum(k not in self._kept for k in keys)
        fresh: dict[Hashable, torch.Tensor] = {}
        pending: dict[Hashable, np.ndarray] = {}  # decoded, not resized yet: at most RESIZE_BYTES of them

        def resize() -> None:
            for key, pixels in zip(pending, self.prep.resize(np.stack(list(pending.values()))), strict=True):
                fresh[key] = pixels
                slot = self._slot(pixels) if self.budget else None
                if slot is not None:
                    self._kept[key] = slot.copy_(pixels)
                    self.used += pixels.nbytes
            pending.clear()

        held = 0
        for ex in examples:
            ks = ex.frame_keys(self.frames)
            if all(k in self._kept or k in fresh or k in pending for k in ks):
                continue
            for key, frame in zip(ks, ex.frames(self.frames), strict=True):  # each example decoded once
                if key in self._kept or key in fresh or key in pending:
                    continue
                if pending and held + frame.nbytes > RESIZE_BYTES:
                    resize()
                    held = 0
                pending[key] = frame
                held += frame.nbytes
        if pending:
            resize()
        self.hits += len(keys) - missing
        self.misses += missing
        pixels = torch.stack([self._kept[k] if k in self._kept else fresh[k] for k in keys])
        return self.prep.normalise(pixels)

    @property
    def reserved(self) -> int:
        """Bytes of the blocks allocated so far (at most the budget)."""
        return sum(b.nbytes for b in self._blocks)

    def _slot(self, pixels: torch.Tensor) -> torch.Tensor | None:
        """The next free slot for a screen like ``pixels`` (a new block when the last is full), or
        None when the budget has no room for another block. Every screen has the same shape: the
        prep's."""
        if not self._blocks or self._filled == len(self._blocks[-1]):
            slots = min(max(1, BLOCK_BYTES // pixels.nbytes), (self.budget - self.reserved) // pixels.nbytes)
            if slots < 1:
                return None
            self._blocks.append(torch.empty((slots, *pixels.shape), dtype=pixels.dtype, device=pixels.device))
            self._filled = 0
        self._filled += 1
        return self._blocks[-1][self._filled - 1]


def _raw(examples: list[Example], frames: int) -> np.ndarray:
    return np.stack([f for ex in examples for f in ex.frames(frames)])


class Prefetch:
    """``load(step)`` for the next step runs on a background thread while this step trains; nothing
    is prepared for ``last`` or beyond.

    ``wait`` counts the seconds :meth:`get` blocked: the data-wait share of the run."""

    def __init__(self, load: Callable[[int], tuple], last: int):
        self.load, self.last, self.wait = load, last, 0.0
        self._pool = ThreadPoolExecutor(1)
        self._next: tuple[int, Future] | None = None

    def get(self, step: int) -> tuple:
        t = time.perf_counter()
        if self._next is None or self._next[0] != step:
            self._next = (step, self._pool.submit(self.load, step))
        result = self._next[1].result()
        self._next = (step + 1, self._pool.submit(self.load, step + 1)) if step + 1 < self.last else None
        self.wait += time.perf_counter() - t
        return result

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
