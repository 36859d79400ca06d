"""Train the choice policy on atari-data records, durably. Reads top to bottom: config, data,
model, loop.

A run lives in ``out``: ``state.pt`` (weights, optimiser, step, random states, per-group sample
counts, best record, log, time spent) is written to a temporary name and renamed after every
evaluation and every ``state_minutes``; the same command again resumes from it (the time budget
counts time already spent, the sampler is re-seeded from (seed, step)); ``restart`` starts over.
``log.jsonl`` holds one line per evaluation; ``best/`` is the checkpoint with the lowest
validation NLL; ``final/`` the last one, calibrated.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from atari_data.layout import GameDir, list_games
from laya_policy.backbone import build_backbone
from laya_policy.checkpoint import AgentConfig, load_checkpoint, save_checkpoint
from laya_policy.imageprep import ImagePrep
from laya_policy.model import ChoicePolicy
from laya_policy.objectives import expected_calibration_error, fit_temperature, nll, training_loss


@dataclass
class TrainConfig:
    data: str
    out: str = "runs/train"
    sources: list[str] | None = None
    games: list[str] | None = None
    frames: int = 2
    model: str = "tiny"
    init_from: str | None = None
    image_size: int = 128
    preprocess: str = "gpu"
    batch: int = 16
    steps: int = 200
    max_minutes: float = 15.0
    balance: str = "game"              # or game_source
    freeze: str = "vision"             # or none
    lr_head: float = 1e-4
    lr_backbone: float = 2e-5
    spherical_weight: float = 0.5
    evals: int = 4
    eval_records: int = 256
    state_minutes: float = 2.0
    seed: int = 0
    device: str = "cpu"
    restart: bool = False
    crash_at_step: int | None = None
    calibrate_on: list[str] | None = None  # held-out games for the temperature fit (not trained on)


@dataclass
class Sample:
    game: GameDir
    rec: dict


class CrashForTesting(RuntimeError):
    pass


# -- data ------------------------------------------------------------------------------------------

def load_records(cfg: TrainConfig, split: str) -> dict[str, list[Sample]]:
    """Records by balancing group: game, or (game, source)."""
    groups: dict[str, list[Sample]] = {}
    for g in list_games(cfg.data, cfg.sources, cfg.games):
        key = g.game if cfg.balance == "game" else f"{g.game}/{g.source}"
        groups.setdefault(key, []).extend(Sample(g, r) for r in g.records(split))
    return {k: v for k, v in sorted(groups.items()) if v}


def frames_of(samples: list[Sample], n_frames: int) -> np.ndarray:
    """uint8 [n_frames * B, H, W, 3], oldest first within each sample, samples in order."""
    out = []
    for s in samples:
        if n_frames == 2:  # a one-frame source's previous frame is its current one
            out.append(s.game.frame(s.rec, prev="prev_image" in s.rec))
        out.append(s.game.frame(s.rec))
    return np.stack(out)


def targets_of(samples: list[Sample], k: int) -> torch.Tensor:
    t = torch.zeros(len(samples), k)
    for i, s in enumerate(samples):
        if s.rec.get("target") is not None:
            t[i, : len(s.rec["target"])] = torch.tensor(s.rec["target"])
        else:
            t[i, s.rec["label"]] = 1.0
    return t


# -- the run -----------------------------------------------------------------------------------------

def lr_factor(step: int, total: int, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Linear warm-up over the first 3% of steps, then cosine down to 10%."""
    w = max(1, int(total * warmup))
    if step < w:
        return (step + 1) / w
    progress = (step - w) / max(1, total - w)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


class Run:
    def __init__(self, cfg: TrainConfig):
        self.cfg, self.out = cfg, Path(cfg.out)
        self.out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        if cfg.init_from:
            self.model, _ = load_checkpoint(cfg.init_from, cfg.device)
        else:
            backbone, tokenizer = build_backbone(cfg.model, image_size=cfg.image_size, seed=cfg.seed)
            self.model = ChoicePolicy(backbone, tokenizer).to(cfg.device)
        if cfg.freeze == "vision":
            for p in self.model.backbone.vision_model.parameters():
                p.requires_grad_(False)
        self.prep = ImagePrep(cfg.image_size, cfg.preprocess, device=cfg.device)
        head = [p for n, p in self.model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
        body = [p for n, p in self.model.named_parameters() if n.startswith("backbone.") and p.requires_grad]
        scale = math.sqrt(cfg.batch / 16)
        self.opt = torch.optim.AdamW(
            [{"params": head, "lr": cfg.lr_head}, {"params": body, "lr": cfg.lr_backbone * scale}], weight_decay=0.01)
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.train, self.val = load_records(cfg, "train"), load_records(cfg, "val")
        if not self.train:
            raise ValueError(f"{cfg.data}: no ready training records for sources {cfg.sources} and games {cfg.games}")
        self.step, self.spent, self.counts, self.best, self.log = 0, 0.0, dict.fromkeys(self.train, 0), None, []
        self.crashed = False

    # -- durability ----------------------------------------------------------------------------------
    def save_state(self) -> None:
        state = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                 "spent": self.spent, "counts": self.counts, "best": self.best, "log": self.log,
                 "torch_rng": torch.get_rng_state(), "config": asdict(self.cfg)}
        tmp = self.out / ".state.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.out / "state.pt")

    def resume(self) -> bool:
        path = self.out / "state.pt"
        if self.cfg.restart or not path.exists():
            return False
        state = torch.load(path, map_location=self.cfg.device, weights_only=False)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.step, self.spent, self.counts = state["step"], state["spent"], state["counts"]
        self.best, self.log = state["best"], state["log"]
        torch.set_rng_state(state["torch_rng"])
        return True

    # -- one step ----------------------------------------------------------------------------------
    def batch(self) -> list[Sample]:
        rng = random.Random(self.cfg.seed * 1_000_003 + self.step)  # re-seeded from (seed, step): resumable
        keys = list(self.train)
        picks = []
        for _ in range(self.cfg.batch):
            k = rng.choice(keys)
            self.counts[k] += 1
            picks.append(rng.choice(self.train[k]))
        return picks

    def logits(self, samples: list[Sample], shuffle: bool) -> tuple[torch.Tensor, list[list[int]]]:
        frames = frames_of(samples, self.cfg.frames)
        with torch.set_grad_enabled(self.cfg.freeze != "vision" and self.model.training):
            feats = self.model.encode_images(self.prep(frames))
        feats = feats.reshape(len(samples), self.cfg.frames, *feats.shape[1:])
        rng = random.Random(self.cfg.seed * 7_919 + self.step)  # option orders: also from (seed, step)
        orders = []
        for s in samples:
            order = list(range(len(s.rec["actions"])))
            if shuffle:
                rng.shuffle(order)  # one model for any option order
            orders.append(order)
        enc = self.model.encode([s.rec["question"] for s in samples], self.cfg.frames, orders)
        return self.model(feats, enc), orders

    def train_step(self, total: int) -> float:
        self.model.train()
        samples = self.batch()
        logits, _ = self.logits(samples, shuffle=True)
        loss = training_loss(logits, targets_of(samples, logits.shape[1]).to(logits.device), self.cfg.spherical_weight)
        for group, base in zip(self.opt.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * lr_factor(self.step, total)
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self) -> dict:
        self.model.eval()
        per_game, all_logits, all_labels = {}, [], []
        for key, samples in self.val.items():
            picked = samples[:: max(1, len(samples) // self.cfg.eval_records)][: self.cfg.eval_records]
            logits, labels = [], []
            for i in range(0, len(picked), self.cfg.batch):
                chunk = picked[i: i + self.cfg.batch]
                lg, _ = self.logits(chunk, shuffle=False)
                logits.append(lg.cpu())
                labels.append(torch.tensor([s.rec["label"] for s in chunk]))
            lg, lb = torch.cat(logits), torch.cat(labels)
            finite = torch.where(torch.isinf(lg), torch.full_like(lg, -1e9), lg)
            per_game[key] = {"accuracy": (lg.argmax(-1) == lb).float().mean().item(), "nll": nll(finite, lb),
                             "ece": expected_calibration_error(finite, lb), "records": len(lb)}
            all_logits.append(finite)
            all_labels.append(lb)
        entry = {"step": self.step, "minutes": round(self.spent / 60, 3), "games": per_game,
                 "nll": float(np.mean([g["nll"] for g in per_game.values()])) if per_game else None}
        self._holdout = (all_logits, all_labels)
        return entry

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, progress: bool = True) -> dict:
        from tqdm import tqdm

        resumed = self.resume()
        cfg, total = self.cfg, self.cfg.steps
        eval_at = {round(total * (i + 1) / cfg.evals) for i in range(cfg.evals)} if self.val else set()
        budget, start, last_state = cfg.max_minutes * 60, time.monotonic() - self.spent, time.monotonic()
        bar = tqdm(total=total, initial=self.step, desc="train", unit="step", disable=None if progress else True)
        while self.step < total and time.monotonic() - start < budget:
            if cfg.crash_at_step is not None and self.step == cfg.crash_at_step and not resumed:
                raise CrashForTesting(f"--crash-at-step {cfg.crash_at_step}")
            loss = self.train_step(total)
            self.spent = time.monotonic() - start
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            if self.step in eval_at:
                entry = self.evaluate()
                self.log.append(entry)
                with open(self.out / "log.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
                if self.best is None or entry["nll"] < self.best["nll"]:
                    self.best = {"step": self.step, "nll": entry["nll"]}
                    save_checkpoint(self.model, self.agent_config(), self.out / "best")
                self.save_state()
                last_state = time.monotonic()
            elif time.monotonic() - last_state > max(120.0, cfg.state_minutes * 60):
                self.save_state()
                last_state = time.monotonic()
        bar.close()
        self.save_state()
        return self.finish()

    def agent_config(self, temperature: float = 1.0) -> AgentConfig:
        return AgentConfig(image_size=self.cfg.image_size, preprocess=self.cfg.preprocess, frames=self.cfg.frames,
                           temperatures={"choice": temperature}, backbone=self.cfg.model)

    def finish(self) -> dict:
        """Fit a temperature on held-out games and write ``final/``. The fit is skipped when raw ECE is
        already below 0.05, or when the only holdout is the training games' (it over-flattens)."""
        temperature, calib = 1.0, {}
        holdout = self.val
        if self.cfg.calibrate_on:
            holdout = load_records(TrainConfig(**{**asdict(self.cfg), "games": self.cfg.calibrate_on}), "val")
        if holdout:
            self.val, trained_val = holdout, self.val
            self.evaluate()
            self.val = trained_val
            per_game, labels = self._holdout
            k = max(lg.shape[1] for lg in per_game)  # games differ in option count: pad with impossible options
            logits = torch.cat([torch.nn.functional.pad(lg, (0, k - lg.shape[1]), value=-1e9) for lg in per_game])
            labels = torch.cat(labels)
            raw = expected_calibration_error(logits, labels)
            calib = {"ece_before": raw, "holdout": sorted(holdout)}
            if raw < 0.05:
                calib["skipped"] = "ECE already below 0.05"
            elif set(holdout) <= set(self.train):
                calib["skipped"] = "the holdout is only the training games' (pass calibrate_on)"
            else:
                temperature = fit_temperature(logits, labels)
                calib.update(temperature=temperature,
                             ece_after=expected_calibration_error(logits / temperature, labels))
        save_checkpoint(self.model, self.agent_config(temperature), self.out / "final")
        summary = {"steps": self.step, "minutes": round(self.spent / 60, 3), "best": self.best, "calibration": calib,
                   "samples_per_group": self.counts}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary


def train(cfg: TrainConfig, progress: bool = True) -> dict:
    return Run(cfg).run(progress)

