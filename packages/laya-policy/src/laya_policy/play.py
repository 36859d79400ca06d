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

from atari_data.schema.questions import game_question
from laya_policy.cache import FrameFeatureCache
from laya_policy.checkpoint import load_whole
from laya_policy.distributed import check_device
from laya_policy.imageprep import ImagePrep
from laya_policy.model import ChoicePolicy


class PathMismatch(ValueError):
    pass


class LayaPolicy:
    def __init__(
        self,
        checkpoint: str,
        device: str = "cpu",
        preprocess: str | None = None,
        force: bool = False,
        cache: bool | None = None,
        cuda_graph: bool = False,
    ):
        check_device(device)
        # one and the same checkpoint's weights and fingerprint, while a training run may be replacing it
        folder, self.model, self.cfg, said = load_whole(checkpoint, device)
        path = preprocess or self.cfg.preprocess
        if path != self.cfg.preprocess and not force:
            raise PathMismatch(
                f"{checkpoint} was trained with preprocess={self.cfg.preprocess}; playing it with "
                f"{path} changes what it sees (even small filter differences cost play strength). "
                "Pass force=True to do it anyway."
            )
        self.device = torch.device(device)
        self.prep = ImagePrep(self.cfg.image_size, path, self.cfg.image_interpolation, device)
        self.temperature = float(self.cfg.temperatures.get("choice", 1.0))
        use_cache = path == "gpu" if cache is None else cache
        self.cache = FrameFeatureCache(self._encode) if use_cache else None
        self.identity = {
            "checkpoint": str(checkpoint),
            "fingerprint": said,  # what push checks a results file by
            "backbone": self.cfg.backbone,
            "frames": self.cfg.frames,
            "image_size": self.cfg.image_size,
            "preprocess": path,
        }
        self._question: dict | None = None
        self._asked: tuple | None = None  # (game, actions, platform) of the question
        if cuda_graph and self.device.type != "cuda":
            raise ValueError(f"cuda_graph needs a CUDA device (got {device})")
        if cuda_graph and not isinstance(self.model, ChoicePolicy):
            raise ValueError(f"cuda_graph replays a VLM's language model; {checkpoint} is a {self.cfg.backbone}")
        self.cuda_graph = cuda_graph
        self._graphs: dict = {}  # batch size -> (graph, static features, static logits), for this question

    def _encode(self, frames: np.ndarray) -> torch.Tensor:
        with torch.inference_mode():
            return self.model.encode_images(self.prep(frames))

    def reset(self, game: str, actions, platform: str = "ale") -> None:
        asked = (game, tuple(actions), platform)
        if asked != self._asked:  # the graphs replay one question's model: kept for it
            self._graphs.clear()
        self._question = game_question(game, list(actions), platform)["action"]
        self._asked = asked
        if self.cache is not None:
            self.cache.clear()

    def __call__(self, batch) -> np.ndarray:
        """laya-eval's policy protocol: a batch of decisions in one game -> probabilities [n, actions]."""
        asked = (batch.game, tuple(batch.actions), getattr(batch, "platform", "ale"))
        if self._question is None or asked != self._asked:
            self.reset(*asked)
        return self.probabilities(batch.frames, batch.prev_frames)

    @torch.inference_mode()
    def probabilities(self, frames: np.ndarray, prev_frames: np.ndarray) -> np.ndarray:
        """Calibrated probabilities over the current game's actions for [n, H, W, 3] screens."""
        n = len(frames)
        screens = np.concatenate([prev_frames, frames]) if self.cfg.frames == 2 else frames
        feats = self.cache(screens) if self.cache is not None else self._encode(screens)
        feats = feats.reshape(self.cfg.frames, n, *feats.shape[1:]).transpose(0, 1)  # [n, frames, tokens, hidden]
        if self.cuda_graph:
            graph, static_in, static_out = self._graph(n, feats)
            static_in.copy_(feats)
            graph.replay()
            logits = static_out
        else:
            enc = self.model.encode([self.question] * n, n_images=self.cfg.frames)
            logits = self.model(feats.to(self.device), enc)
        return torch.softmax(logits / self.temperature, -1).double().cpu().numpy()

    @property
    def question(self) -> dict:
        if self._question is None:
            raise ValueError("reset(game, actions) first: the question names the game's buttons")
        return self._question

    def _graph(self, n: int, feats: torch.Tensor):
        """The language model and head for ``n`` decisions of this game, captured once as a CUDA graph
        (fixed shapes: the question is the same for every row); the vision tower and cache stay eager."""
        if n not in self._graphs:
            assert isinstance(self.model, ChoicePolicy)  # __init__ refused anything else
            enc = self.model.to_device(self.model.encode([self.question] * n, n_images=self.cfg.frames), self.device)
            enc.attention_mask = None  # every row asks the same question: no padding, no mask to inspect
            static_in = feats.detach().clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up outside the capture, as CUDA graphs require
                for _ in range(2):
                    self.model(static_in, enc)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = self.model(static_in, enc)
            self._graphs[n] = (graph, static_in, static_out)
        return self._graphs[n]

    def frames_policy(self):
        """The ``policy(frames, game, actions)`` callable atari-data's DAgger writer plays."""
        current = {}

        def policy(frames, game, actions):
            if current.get("game") != (game, tuple(actions)):
                self.reset(game, actions)
                current["game"] = (game, tuple(actions))
            return self.probabilities(frames[1][None], frames[0][None])[0]

        return policy


def make_policy(arg: str | None = None, **kwargs) -> LayaPolicy:
    """The `laya` entry point of laya-eval: ``laya:CKPT``."""
    if not arg:
        raise ValueError("laya needs a checkpoint: --policy laya:CKPT")
    return LayaPolicy(arg, **kwargs)
