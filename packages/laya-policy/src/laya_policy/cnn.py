"""The reference student: a Nature-DQN-sized convolutional network trained by behaviour cloning.

Not the product. It is what a practitioner would train instead of a vision-language model, so the
VLM's numbers are reported beside it (``laya-policy train --model cnn``). It trains with the same
loop, data, soft-target loss, calibration and checkpoint folder as the VLM, and laya-eval plays it
through the same ``laya`` entry point, so both are judged the same way.

The screens arrive as the VLM's do (resized on the device to ``image_size``, ``presets.CNN_IMAGE_SIZE`` by default, and
normalised); the network turns each into luminance and, with two frames, feeds the newest frame and
its motion (the newest minus the previous, times ``MOTION_GAIN``) as channels to the three
convolutions of Mnih et al. (2015) and a 512-unit layer. It scores all 18 ALE
buttons and reads each record's options from them by name, so one network serves every game and
any option order; it does not read the question's text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from laya_policy.presets import CNN_IMAGE_SIZE, INPUTS, MOTION, MOTION_GAIN, check_size, takes_motion
from laya_protocol.games import FULL_ACTIONS

NEG_INF = float("-inf")
LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, the weights of ALE's own greyscale


@dataclass
class Options:
    """Each record's options as indices into FULL_ACTIONS (the question's order), padded."""

    index: torch.Tensor  # [B, K] long, 0 where padded
    mask: torch.Tensor  # [B, K] bool


class NatureCNN(nn.Module):
    """Why motion: Breakout's ball is a pixel or two after the resize, and the labels turn on where it
    moves; given the two frames as they are, the network stays at Breakout's majority label for
    thousands of steps, given the frame and its scaled difference it leaves it within one thousand
    (the measurements: docs/learning-on-a-cpu.md, "Why Breakout stayed at its majority label"). A
    linear change of input, so the same functions are reachable: only how fast they are found differs."""

    def __init__(self, frames: int = 2, image_size: int = CNN_IMAGE_SIZE, inputs: str = MOTION):
        super().__init__()
        check_size(image_size)
        if inputs not in INPUTS:
            raise ValueError(f"cnn inputs {inputs!r}: expected one of {', '.join(INPUTS)}")
        self.frames, self.image_size, self.inputs = frames, image_size, inputs
        self.convs = nn.Sequential(
            nn.Conv2d(frames, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, frames, image_size, image_size)).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, len(FULL_ACTIONS)))
        self._index = {name: i for i, name in enumerate(FULL_ACTIONS)}

    def encode_images(self, pixel_values: torch.Tensor, train_vision: bool = True) -> torch.Tensor:
        """Normalised screens [n, 3, S, S] -> luminance [n, S, S]: what a frame cache keeps per screen."""
        luma = torch.tensor(LUMA, dtype=pixel_values.dtype, device=pixel_values.device)
        return torch.einsum("nchw,c->nhw", pixel_values, luma)

    def encode(self, questions: list[dict], n_images: int, orders: list[list[int]] | None = None) -> Options:
        """Each question's options by name; the order they are shown in does not matter to this network."""
        names = [list(q["criteria"]) for q in questions]
        unknown = sorted({n for row in names for n in row} - set(self._index))
        if unknown:
            raise ValueError(f"the CNN scores ALE buttons only; the question offers {', '.join(unknown)}")
        k = max(map(len, names))
        index = torch.zeros(len(names), k, dtype=torch.long)
        mask = torch.zeros(len(names), k, dtype=torch.bool)
        for b, row in enumerate(names):
            index[b, : len(row)] = torch.tensor([self._index[n] for n in row])
            mask[b, : len(row)] = True
        return Options(index, mask)

    @staticmethod
    def to_device(enc: Options, device) -> Options:
        return Options(enc.index.to(device), enc.mask.to(device))

    def channels(self, luma: torch.Tensor) -> torch.Tensor:
        """Luminance [B, frames, S, S] (oldest first) -> the convolutions' input channels."""
        if not takes_motion(self.inputs, self.frames):
            return luma
        newest = luma[:, -1:]
        return torch.cat([newest, MOTION_GAIN * (newest - luma[:, :-1])], 1)

    def forward(self, image_features: torch.Tensor, enc: Options, question_type=None) -> torch.Tensor:
        """Option logits [B, K] from luminance [B, frames, S, S] (oldest first)."""
        scores = self.fc(self.convs(self.channels(image_features)))  # [B, 18]
        index, mask = enc.index.to(scores.device), enc.mask.to(scores.device)
        return torch.gather(scores, 1, index).masked_fill(~mask, NEG_INF)
