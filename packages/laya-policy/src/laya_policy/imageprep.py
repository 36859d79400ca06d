"""Turning game screens into the vision tower's input, on the model's device.

SmolVLM's processor (``Idefics3ImageProcessorPil``, image splitting off) resizes a screen twice
with Pillow's LANCZOS filter: so that its longest side is 2048 (the other side scaled, rounded
down, made even), then to ``size`` x ``size``; it then rescales to [0, 1] and normalises with mean
and std 0.5. On a 210x160 Atari screen that is 210x160 -> 2048x1560 -> 512x512.

Resizing is linear along each axis, so the two hops compose into one matrix per axis, computed
once in float64: ``out = A_h @ frame @ A_w.T`` per channel, two matmuls on the device (each by
the operator's nonzero blocks: a resampling operator is banded), then rounded, clamped to 0..255
and normalised as the processor does. The processor goes through 2048
at every final size (its ``size`` is SmolVLM's, ``max_image_size`` the final one), and so does the
operator. What a linear operator cannot do is the processor's uint8 intermediate: LANCZOS
overshoots at hard edges (a 0 -> 200 edge rings below 0 and above 200), and Pillow clamps those
overshoots to 0..255 (and rounds) in the 2048x1560 image before shrinking it. That clamping is most
of the residual (measured on MsPacman at 128: 0.70 grey levels mean, 0.10 when only the clamp is
added to the float path, 0.0002 for ``lanczos2-exact``), and it grows with the shrink factor, so
128 differs more than 512; tests/laya_policy/test_imageprep.py states the bounds per game.

``interpolation`` picks the operator: ``lanczos2`` (the processor's two hops composed, default),
``lanczos2-exact`` (the four passes one by one, rounded and clamped like Pillow: equal to the
processor up to 1 grey level, but it goes through the 2048x1560 intermediate, ~40x the arithmetic;
for GPUs), ``lanczos`` (one hop), ``bicubic`` or ``bilinear`` (Pillow's filters, one hop).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import torch

INTERPOLATIONS = ("lanczos2", "lanczos2-exact", "lanczos", "bicubic", "bilinear")
PROCESSOR_LONGEST_EDGE = 2048


def _lanczos(x: float) -> float:
    def sinc(v):
        return 1.0 if v == 0 else math.sin(math.pi * v) / (math.pi * v)

    return sinc(x) * sinc(x / 3.0) if -3.0 < x < 3.0 else 0.0


def _bicubic(x: float, a: float = -0.5) -> float:
    x = abs(x)
    if x < 1:
        return ((a + 2) * x - (a + 3)) * x * x + 1
    if x < 2:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _bilinear(x: float) -> float:
    return max(0.0, 1.0 - abs(x))


FILTERS = {"lanczos": (_lanczos, 3.0), "bicubic": (_bicubic, 2.0), "bilinear": (_bilinear, 1.0)}


@lru_cache(maxsize=64)
def resize_matrix(n_in: int, n_out: int, kind: str = "lanczos") -> np.ndarray:
    """[n_out, n_in] float64 weights of Pillow's antialiased resampling along one axis."""
    f, support_unit = FILTERS[kind]
    scale = n_in / n_out
    filterscale = max(1.0, scale)
    support = support_unit * filterscale
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        centre = (i + 0.5) * scale
        lo = max(int(centre - support + 0.5), 0)
        hi = min(int(centre + support + 0.5), n_in)
        w = np.array([f((j - centre + 0.5) / filterscale) for j in range(lo, hi)])
        total = w.sum()
        m[i, lo:hi] = w / total if total != 0 else w
    return m


def processor_intermediate(h: int, w: int, longest: int = PROCESSOR_LONGEST_EDGE) -> tuple[int, int]:
    """The size of the processor's first hop: longest side ``longest``, the other scaled and made even."""
    if w >= h:
        nh = int(longest / (w / h))
        return nh + (nh % 2), longest
    nw = int(longest * (w / h))
    return longest, nw + (nw % 2)


@lru_cache(maxsize=32)
def axis_operators(h: int, w: int, size: int, interpolation: str = "lanczos2") -> tuple[np.ndarray, np.ndarray]:
    """(A_h [size, h], A_w [size, w]) in float64 for one input shape."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation {interpolation!r}: expected one of {', '.join(INTERPOLATIONS)}")
    if interpolation in ("lanczos2", "lanczos2-exact"):
        mh, mw = processor_intermediate(h, w)
        return (resize_matrix(mh, size) @ resize_matrix(h, mh), resize_matrix(mw, size) @ resize_matrix(w, mw))
    return resize_matrix(h, size, interpolation), resize_matrix(w, size, interpolation)


#: On a CPU frames are resized a few at a time, so that each one's intermediate and output stay in the
#: cache: at 512 px (3 MB of output a frame) the banded product of a batch of 32 in one go ran at 9.8 ms
#: a frame, one frame at a time at 2.3 (one thread, a one-off timing). A GPU takes the batch in one go.
CPU_CHUNK_BYTES = 4 * 2**20


def band_blocks(a: np.ndarray, rows: int = 64) -> list[tuple[int, int, int, int]]:
    """(first row, end row, first column, end column) of each block of ``rows`` rows of ``a`` and the
    columns its nonzero weights span. A resampling operator is banded (the composed Lanczos at 512 px
    has 8-9 nonzero weights a row of 160-210), so multiplying by its blocks does a fifth of the dense
    product's work, with the same terms: only exact zeros are left out. The terms may be summed in
    another order than the dense product's, so a value on a .5 boundary can round the other way: no
    value differed on 1,000 real frames of five games at 128 and 512 px (lanczos2), up to a few dozen
    by one grey level at other sizes and filters."""
    nonzero = a != 0
    first = nonzero.argmax(1)
    last = a.shape[1] - 1 - nonzero[:, ::-1].argmax(1)
    blocks = []
    for r0 in range(0, a.shape[0], rows):
        r1 = min(r0 + rows, a.shape[0])
        blocks.append((r0, r1, int(first[r0:r1].min()), int(last[r0:r1].max()) + 1))
    return blocks


class ImagePrep:
    """Screens (uint8 ``[N, H, W, 3]``, numpy or torch) to normalised float ``[N, 3, size, size]``.

    ``mode="gpu"``: the composed operator on ``device`` (any device; the name says where it pays).
    ``mode="processor"``: SmolVLM's own PIL processor on the CPU, the reference.
    """

    def __init__(self, size: int = 512, mode: str = "gpu", interpolation: str = "lanczos2", device="cpu"):
        if (
            not isinstance(size, int) or size < 1
        ):  # the model's own rules (patches, merging) are checked where it is built
            raise ValueError(f"image size {size!r}: expected a positive number of pixels")
        if mode not in ("gpu", "processor"):
            raise ValueError(f"preprocess {mode!r}: expected gpu or processor")
        self.size, self.mode, self.interpolation, self.device = size, mode, interpolation, torch.device(device)
        self._ops: dict[tuple, tuple] = {}  # (h, w): each axis's blocks; ("exact", h, w): the four passes' matrices
        self._processor = None

    def _operators(self, h: int, w: int):
        """Each axis operator's nonzero blocks: [(r0, r1, c0, c1, weights [r1 - r0, c1 - c0])]."""
        if (h, w) not in self._ops:
            self._ops[(h, w)] = tuple(
                [
                    (r0, r1, c0, c1, torch.as_tensor(a[r0:r1, c0:c1], dtype=torch.float32, device=self.device))
                    for r0, r1, c0, c1 in band_blocks(a)
                ]
                for a in axis_operators(h, w, self.size, self.interpolation)
            )
        return self._ops[(h, w)]

    def __call__(self, frames) -> torch.Tensor:
        if self.mode == "processor":
            return self._via_processor(frames)
        return self._by_chunks(frames, normalised=True)

    @staticmethod
    def normalise(pixels: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Resized screens ``[N, 3, size, size]`` (uint8, or float holding whole numbers 0..255) to
        the tower's input, as the processor normalises (into ``out`` when given: float32, that shape)."""
        if out is None:  # one new tensor, scaled in place: a third of the memory traffic of (x - a) / b
            return pixels.to(torch.float32, copy=True).sub_(127.5).div_(127.5)
        return torch.sub(pixels, 127.5, out=out).div_(127.5)

    def resize(self, frames) -> torch.Tensor:
        """The device-side path up to the processor's last rounding: uint8 ``[N, 3, size, size]``
        (exact, so a cache of these gives the same input as resizing again)."""
        if self.mode == "processor":
            raise ValueError("resize() is the device-side path (mode gpu); the processor normalises itself")
        return self._by_chunks(frames, normalised=False)

    def _by_chunks(self, frames, normalised: bool) -> torch.Tensor:
        """Resized uint8 ``[N, 3, size, size]`` screens, or with ``normalised`` the tower's float
        input, made a chunk of frames at a time: on a CPU as many as fit :data:`CPU_CHUNK_BYTES`,
        elsewhere all at once."""
        x = torch.as_tensor(frames, device=self.device)
        if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"expected uint8 [N, H, W, 3] screens, got {x.dtype} {tuple(x.shape)}")
        n = len(x)
        step = max(1, CPU_CHUNK_BYTES // (3 * self.size**2 * 4)) if self.device.type == "cpu" else max(n, 1)
        dtype = torch.float32 if normalised else torch.uint8
        out = torch.empty((n, 3, self.size, self.size), dtype=dtype, device=self.device)
        for i in range(0, n, step):
            pixels = self._resize(x[i : i + step])  # whole numbers 0..255, as float: what uint8 would hold
            if normalised:
                self.normalise(pixels, out[i : i + step])  # scaled where it lands, while still in the cache
            else:
                out[i : i + step] = pixels
        return out

    def _resize(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 ``[n, H, W, 3]`` on the device to ``[n, 3, size, size]`` rounded and clamped to 0..255,
        still float: the uint8 screen's values, without a conversion there and back."""
        x = frames.permute(0, 3, 1, 2).float()  # [n, 3, H, W]
        if self.interpolation == "lanczos2-exact":
            x = self._four_passes(x)
        else:  # A_h @ x @ A_w.T, block by block of each banded operator
            ah, aw = self._operators(x.shape[2], x.shape[3])
            y = x.new_empty((*x.shape[:2], self.size, x.shape[3]))
            for r0, r1, c0, c1, block in ah:
                torch.matmul(block, x[..., c0:c1, :], out=y[..., r0:r1, :])
            x = x.new_empty((*x.shape[:2], self.size, self.size))
            for r0, r1, c0, c1, block in aw:
                torch.matmul(y[..., c0:c1], block.T, out=x[..., r0:r1])
        return x.round_().clamp_(0, 255)

    def _four_passes(self, x: torch.Tensor) -> torch.Tensor:
        """Pillow's order: per hop a horizontal then a vertical pass, each rounded to 8 bits."""
        h, w = x.shape[2], x.shape[3]
        mh, mw = processor_intermediate(h, w)
        key = ("exact", h, w)
        if key not in self._ops:
            mats = [
                resize_matrix(w, mw),
                resize_matrix(h, mh),
                resize_matrix(mw, self.size),
                resize_matrix(mh, self.size),
            ]
            self._ops[key] = tuple(torch.as_tensor(m, dtype=torch.float32, device=self.device) for m in mats)
        uw, uh, dw, dh = self._ops[key]
        x = torch.matmul(x, uw.T).round_().clamp_(0, 255)
        x = torch.matmul(uh, x).round_().clamp_(0, 255)
        x = torch.matmul(x, dw.T).round_().clamp_(0, 255)
        return torch.matmul(dh, x)

    @property
    def processor(self):
        if self._processor is None:
            self._processor = smolvlm_image_processor(self.size)
        return self._processor

    def _via_processor(self, frames) -> torch.Tensor:
        arr = frames.cpu().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
        out = self.processor(images=[[f] for f in arr], return_tensors="pt")["pixel_values"]  # [N, 1, 3, S, S]
        return out[:, 0].to(self.device)


def smolvlm_image_processor(size: int = 512):
    """Idefics3's PIL image processor set up as SmolVLM's, at any ``size``: LANCZOS to a longest edge of
    2048 (SmolVLM's ``size``, whatever the final size), then to ``size`` (``max_image_size``); no splitting."""
    from transformers import Idefics3ImageProcessorPil
    from transformers.image_utils import PILImageResampling

    return Idefics3ImageProcessorPil(
        do_resize=True,
        size={"longest_edge": PROCESSOR_LONGEST_EDGE},
        resample=PILImageResampling.LANCZOS,
        do_image_splitting=False,
        max_image_size={"longest_edge": size},
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        do_pad=False,
        do_convert_rgb=True,
    )
