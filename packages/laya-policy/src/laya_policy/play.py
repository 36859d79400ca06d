"""Playing a checkpoint through laya-eval's policy protocol (`laya-eval run --policy laya:CKPT`).

Each call gets a batch of decisions (current and previous screens by the two-frame rule), asks
every row the same question (``atari_question``), and returns calibrated probabilities over the
game's actions; laya-eval takes the top one or samples. On the device-side preprocessing path the
vision features of every screen go through a FrameFeatureCache, so a previous screen that was the
current screen of the last call is not encoded again.
"""

from __future__ import annotations

import numpy as np
import torch

from atari_data.questions import atari_question
from laya_policy.cache import FrameFeatureCache
from laya_policy.checkpoint import load_checkpoint
from laya_policy.imageprep import ImagePrep


class PathMismatch(ValueError):
    pass


class LayaPolicy:
    def __init__(self, checkpoint: str, device: str = "cpu", preprocess: str | None = None, force: bool = False,
                 cache: bool | None = None):
        self.model, self.cfg = load_checkpoint(checkpoint, device)
        path = preprocess or self.cfg.preprocess
        if path != self.cfg.preprocess and not force:
            raise PathMismatch(f"{checkpoint} was trained with preprocess={self.cfg.preprocess}; playing it with "
                               f"{path} changes what it sees (even small filter differences cost play strength). "
                               "Pass force=True to do it anyway.")
        self.device = torch.device(device)
        self.prep = ImagePrep(self.cfg.image_size, path, self.cfg.image_interpolation, device)
        self.temperature = float(self.cfg.temperatures.get("choice", 1.0))
        use_cache = path == "gpu" if cache is None else cache
        self.cache = FrameFeatureCache(self._encode) if use_cache else None
        self.identity = {"checkpoint": str(checkpoint), "backbone": self.cfg.backbone, "frames": self.cfg.frames,
                         "image_size": self.cfg.image_size, "preprocess": path}
        self._question = None

    def _encode(self, frames: np.ndarray) -> torch.Tensor:
        with torch.inference_mode():
            return self.model.encode_images(self.prep(frames))

    def reset(self, game: str, actions) -> None:
        self._question = atari_question(game, list(actions))["action"]
        if self.cache is not None:
            self.cache.clear()

    @torch.inference_mode()
    def __call__(self, batch) -> np.ndarray:
        if self._question is None:
            self.reset(batch.game, batch.actions)
        n = len(batch)
        screens = np.concatenate([batch.prev_frames, batch.frames]) if self.cfg.frames == 2 else batch.frames
        feats = self.cache(screens) if self.cache is not None else self._encode(screens)
        feats = feats.reshape(self.cfg.frames, n, *feats.shape[1:]).transpose(0, 1)  # [n, frames, tokens, hidden]
        enc = self.model.encode([self._question] * n, n_images=self.cfg.frames)
        logits = self.model(feats.to(self.device), enc)
        return torch.softmax(logits / self.temperature, -1).double().cpu().numpy()


def make_policy(arg: str | None = None, **kwargs) -> LayaPolicy:
    """The `laya` entry point of laya-eval: ``laya:CKPT``."""
    if not arg:
        raise ValueError("laya needs a checkpoint: --policy laya:CKPT")
    return LayaPolicy(arg, **kwargs)
