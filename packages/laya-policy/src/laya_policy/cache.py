"""FrameFeatureCache: encode each distinct screen once in two-frame play.

In two-frame play the previous screen of a decision is the current screen of the decision before,
so about half the frames the vision encoder sees were encoded one call earlier. The cache keys a
frame by a 64-bit hash of its bytes and counts a hit only after the bytes compare equal, so a
hash collision costs an encoding, never a wrong feature. Repeats inside one batch are encoded once;
entries live for the next ``keep`` calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
import torch
import xxhash


def frame_key(frame: np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(frame).data)


class FrameFeatureCache:
    """Wraps ``encode(frames uint8 [n, H, W, 3]) -> features [n, ...]`` with an exact per-frame cache."""

    def __init__(
        self, encode: Callable[[np.ndarray], torch.Tensor], keep: int = 2, key: Callable[[np.ndarray], int] = frame_key
    ):
        self.encode, self.keep, self.key = encode, keep, key
        self.hits = self.misses = 0
        self._entries: dict[int, list[tuple[np.ndarray, torch.Tensor, int]]] = {}
        self._call = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def _lookup(self, k: int, frame: np.ndarray):
        """The cached feature of ``frame`` (kept alive for ``keep`` more calls), or None."""
        bucket = self._entries.get(k, [])
        for n, (stored, feature, _) in enumerate(bucket):
            if np.array_equal(stored, frame):
                bucket[n] = (stored, feature, self._call)
                return feature
        return None

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        self._call += 1
        keys = [self.key(f) for f in frames]
        out: list[torch.Tensor | None] = [None] * len(frames)
        todo: dict[int, list[int]] = {}  # first row of each distinct new frame -> rows that repeat it
        for i, (k, f) in enumerate(zip(keys, frames, strict=True)):
            feature = self._lookup(k, f)
            if feature is not None:
                out[i] = feature
                self.hits += 1
                continue
            first = next((j for j in todo if keys[j] == k and np.array_equal(frames[j], f)), None)
            if first is None:
                todo[i] = [i]
                self.misses += 1
            else:
                todo[first].append(i)
                self.hits += 1
        if todo:
            firsts = list(todo)
            encoded = self.encode(np.stack([frames[j] for j in firsts]))
            for j, feature in zip(firsts, encoded, strict=True):
                for i in todo[j]:
                    out[i] = feature
                self._entries.setdefault(keys[j], []).append((np.array(frames[j]), feature, self._call))
        self._evict()
        return torch.stack(cast(list[torch.Tensor], out))  # every row was filled above

    def _evict(self) -> None:
        for k in list(self._entries):
            kept = [e for e in self._entries[k] if self._call - e[2] < self.keep]
            if kept:
                self._entries[k] = kept
            else:
                del self._entries[k]

    def clear(self) -> None:
        self._entries.clear()
