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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from atari_data.layout import write_atomic
from laya_policy.backbone import PRESETS, SMOLVLM, build_backbone
from laya_policy.checkpoint import AgentConfig, load_checkpoint, load_config, resolve_checkpoint, save_checkpoint
from laya_policy.data import Example, load_examples
from laya_policy.imageprep import ImagePrep
from laya_policy.model import ChoicePolicy
from laya_policy.objectives import expected_calibration_error, fit_temperature, nll, training_loss
from laya_protocol.config import option
from laya_protocol.seeds import PLAY_CHECK_SEED_BASE

#: (head, backbone) learning rates when none is given. A random preset trains everything: its head
#: needs 1e-3 to move, and at 1e-3 its vision tower loses what the random features already tell apart.
DEFAULT_LRS = {"pretrained": (1e-4, 2e-5), "tiny": (1e-3, 1e-4)}


def _lrs(i: int) -> str:
    return ", ".join(f"{f'{pair[i]:.0e}'.replace('e-0', 'e-')} {kind}" for kind, pair in DEFAULT_LRS.items())


@dataclass
class TrainConfig:
    """What `laya-policy train` does; each field is one flag (``--field-name``)."""

    data: str = option(help="an atari-data layout root, a packed repository folder (atari-data pack), or its Hub id")
    out: str = option("runs/train", "run folder")
    sources: list[str] | None = option(None, "comma-separated sources", shown="all")
    games: list[str] | None = option(None, "comma-separated games", shown="all")
    frames: int | None = option(None, "frames per record the model sees", choices=(1, 2), shown="--init-from's, else 2")
    model: str | None = option(
        None,
        f"tiny (random weights, built here), a Hub id such as {SMOLVLM}, or a local directory",
        shown="--init-from's backbone, else tiny",
    )
    init_from: str | None = option(None, "checkpoint to continue from (e.g. after a DAgger round)")
    image_size: int | None = option(
        None,
        "frame side in pixels",
        shown="--init-from's, else the pretrained backbone's vision config, else 128 for a preset",
    )
    preprocess: str | None = option(
        None,
        "device-side resize (gpu) or SmolVLM's processor",
        choices=("gpu", "processor"),
        shown="--init-from's, else gpu",
    )
    batch: int = option(16, "per process")
    passes: float = option(4.0, "passes over the training records (sets the step count)")
    steps: int | None = option(None, "an explicit step count instead of --passes")
    max_minutes: float = option(
        15.0,
        "time budget, resumed runs included; the learning-rate schedule follows "
        "whichever of steps and time runs out first",
    )
    balance: str = option("game", "what sampling balances over", choices=("game", "game_source"))
    freeze: str = option(
        "auto",
        "auto: the vision tower is frozen for a pretrained backbone, trained for tiny",
        choices=("auto", "vision", "none"),
    )
    lr_head: float | None = option(None, "head learning rate", shown=_lrs(0))
    lr_backbone: float | None = option(None, "backbone learning rate, scaled by sqrt(batch/16)", shown=_lrs(1))
    spherical_weight: float = option(0.5, cli=False)
    evals: int = option(4, "evaluations during the run")
    eval_records: int = option(256, cli=False)
    select_by: str = option(
        "nll", "keep OUT/best by validation NLL or by a short play check in laya-eval", choices=("nll", "play")
    )
    state_minutes: float = option(2.0, cli=False)
    seed: int = option(0)
    device: str = option("cpu", "torch device, e.g. cuda")
    restart: bool = option(False, "start over instead of resuming OUT/state.pt")
    crash_at_step: int | None = option(None, "raise once at this step (to exercise resuming)")
    calibrate_on: list[str] | None = option(
        None,
        "games whose val split fits the temperature (not trained on)",
        shown="the training games' own held-out val episodes; ECE is reported on episodes the fit did not use",
    )

    @property
    def backbone(self) -> str:
        """The backbone's name: ``model``, or the one the ``init_from`` checkpoint was built on."""
        if self.model:  # resolve() sets it, so a resolved config reads no file
            return self.model
        return load_config(self.init_from).backbone if self.init_from else "tiny"

    @property
    def pretrained(self) -> bool:
        return self.backbone not in PRESETS  # presets start from random weights


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill frames, image size and preprocessing from the checkpoint continued from (a different value
    given is an error: the checkpoint was trained on its own), else from the pretrained backbone's
    vision config (which fixes its image tokens), else the preset defaults. Before any work is done."""
    from dataclasses import replace

    from laya_policy.backbone import pretrained_image_size

    if cfg.steps is not None and cfg.steps < 1:
        raise ValueError(f"--steps {cfg.steps}: expected 1 or more (leave it out to use --passes)")
    if cfg.image_size is not None and (cfg.image_size < 64 or cfg.image_size % 64):
        raise ValueError(
            f"--image-size {cfg.image_size}: expected a positive multiple of 64 (16-pixel patches, merged 4x4)"
        )
    given = {"model": cfg.model, "frames": cfg.frames, "image_size": cfg.image_size, "preprocess": cfg.preprocess}
    if cfg.init_from:
        cfg = replace(cfg, init_from=str(resolve_checkpoint(cfg.init_from)))  # a Hub id is fetched once, here
        ckpt = asdict(load_config(cfg.init_from))
        ckpt["model"] = ckpt["backbone"]
        for key, value in given.items():
            if value is not None and value != ckpt[key]:
                raise ValueError(
                    f"--{key.replace('_', '-')} {value} differs from the {ckpt[key]} that {cfg.init_from} "
                    "was trained with; leave it out to follow the checkpoint"
                )
        return replace(cfg, **{k: ckpt[k] for k in given})
    cfg = replace(cfg, model=cfg.model or "tiny")
    size = 128 if cfg.image_size is None else cfg.image_size
    if cfg.pretrained:
        native, patch = pretrained_image_size(cfg.model)
        if cfg.image_size is not None and cfg.image_size != native:
            raise ValueError(
                f"--image-size {cfg.image_size}: {cfg.model} takes {native} (its vision config, "
                f"{native // patch}x{native // patch} patches of {patch} merged to its image tokens); "
                f"leave it out or pass {native}"
            )
        size = native
    return replace(cfg, frames=cfg.frames or 2, image_size=size, preprocess=cfg.preprocess or "gpu")


#: The settings a checkpoint's training.json (and so its model card) records.
TRAINING_KEYS = (
    "data",
    "sources",
    "games",
    "frames",
    "image_size",
    "preprocess",
    "batch",
    "passes",
    "steps",
    "balance",
    "freeze",
    "lr_head",
    "lr_backbone",
    "spherical_weight",
    "seed",
    "device",
)


class CrashForTesting(RuntimeError):
    pass


# -- data ------------------------------------------------------------------------------------------


def group_key(ex: Example, balance: str) -> str:
    """The balancing group of an example: its game, or ``game/source``."""
    game, source = ex.group
    return game if balance == "game" else f"{game}/{source}"


def load_groups(cfg: TrainConfig, split: str, games: list[str] | None = None) -> dict[str, list[Example]]:
    """Examples by balancing group (:func:`group_key`)."""
    groups: dict[str, list[Example]] = {}
    for ex in load_examples(cfg.data, split, cfg.sources, games or cfg.games):
        groups.setdefault(group_key(ex, cfg.balance), []).append(ex)
    return {k: v for k, v in sorted(groups.items()) if v}


def frames_of(examples: list[Example], n_frames: int) -> np.ndarray:
    """uint8 [n_frames * B, H, W, 3], oldest first within each example, examples in order."""
    return np.stack([f for ex in examples for f in ex.frames(n_frames)])


def targets_of(examples: list[Example], k: int) -> torch.Tensor:
    t = torch.zeros(len(examples), k)
    for i, ex in enumerate(examples):
        if ex.rec.get("target") is not None:
            t[i, : len(ex.rec["target"])] = torch.tensor(ex.rec["target"])
        else:
            t[i, ex.rec["label"]] = 1.0
    return t


# -- the run -----------------------------------------------------------------------------------------


def lr_factor(progress: float, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Linear warm-up over the first 3% of the run, then cosine down to 10%. ``progress`` in [0, 1] is
    the larger of steps done / steps planned and time spent / time budget, so a run cut short by
    ``max_minutes`` still anneals."""
    if progress < warmup:
        return max(progress, 1e-3) / warmup
    progress = (progress - warmup) / (1 - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


class Distributed:
    """Data parallelism under ``torchrun``/``accelerate launch`` (WORLD_SIZE > 1): every process draws
    its own batch from its own slice of each group, gradients are averaged, rank 0 evaluates and writes."""

    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
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
        t = torch.tensor([float(flag)])
        torch.distributed.all_reduce(t)
        return bool(t.item())

    def agree(self, model) -> bool:
        """Whether every process holds the same weights (they must, after every step)."""
        if self.world == 1:
            return True
        digest = torch.tensor([float(sum(p.double().sum() for p in model.parameters()))], dtype=torch.float64)
        all_ = [torch.zeros_like(digest) for _ in range(self.world)]
        torch.distributed.all_gather(all_, digest)
        return all(torch.equal(a, all_[0]) for a in all_)


class Run:
    def __init__(self, cfg: TrainConfig):
        cfg = resolve(cfg)
        self.cfg, self.out = cfg, Path(cfg.out)
        self.start = load_config(cfg.init_from) if cfg.init_from else None  # the checkpoint continued from
        self.dist = Distributed(cfg.device)
        if self.dist.main:
            self.out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(cfg.seed)
        if cfg.init_from:
            self.model, _ = load_checkpoint(cfg.init_from, cfg.device)
        else:
            backbone, tokenizer = build_backbone(cfg.model, image_size=cfg.image_size, seed=cfg.seed)
            self.model = ChoicePolicy(backbone, tokenizer).to(cfg.device)
        freeze = cfg.freeze if cfg.freeze != "auto" else ("vision" if cfg.pretrained else "none")
        self.train_vision = freeze == "none"
        for p in self.model.backbone.vision_model.parameters():
            p.requires_grad_(self.train_vision)
        self.prep = ImagePrep(cfg.image_size, cfg.preprocess, device=cfg.device)
        default_head, default_body = DEFAULT_LRS["pretrained" if cfg.pretrained else "tiny"]
        lr_head = cfg.lr_head or default_head
        lr_body = (cfg.lr_backbone or default_body) * math.sqrt(cfg.batch / 16)
        head = [p for n, p in self.model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
        body = [p for n, p in self.model.named_parameters() if n.startswith("backbone.") and p.requires_grad]
        self.params = head + body
        self.opt = torch.optim.AdamW(
            [{"params": head, "lr": lr_head}, {"params": body, "lr": lr_body}], weight_decay=0.01
        )
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.train = {k: v[self.dist.rank :: self.dist.world] for k, v in load_groups(cfg, "train").items()}
        self.val = load_groups(cfg, "val") if self.dist.main else {}
        if not self.train:
            raise ValueError(
                f"{cfg.data}: no training records for sources {cfg.sources or 'all'} and games {cfg.games or 'all'}"
            )
        records = sum(map(len, self.train.values())) * self.dist.world
        self.total = cfg.steps or max(1, math.ceil(cfg.passes * records / (cfg.batch * self.dist.world)))
        self.step, self.spent, self.counts, self.best, self.log = 0, 0.0, dict.fromkeys(self.train, 0), None, []
        self.curve, self._losses = [], []  # [step, mean training loss over the last 20 steps]
        self.wait, self.busy = 0.0, 0.0  # seconds waiting for frames / in whole steps, for the data-wait share
        self._pool = ThreadPoolExecutor(1)  # decodes the next batch's frames while this one trains
        self._next = None
        self._save_s = 0.0  # how long the last state.pt took: saves stay under ~5% of wall time

    # -- durability ----------------------------------------------------------------------------------
    def save_state(self) -> None:
        if not self.dist.main:
            return
        state = {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "step": self.step,
            "spent": self.spent,
            "counts": self.counts,
            "best": self.best,
            "log": self.log,
            "curve": self.curve,
            "torch_rng": torch.get_rng_state(),
            "config": asdict(self.cfg),
        }
        t = time.monotonic()
        tmp = self.out / ".state.pt.tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.out / "state.pt")
        self._save_s = time.monotonic() - t

    def resume(self) -> bool:
        path = self.out / "state.pt"
        if self.cfg.restart or not path.exists():
            return False
        try:  # tensors and plain containers only: a planted pickle is refused, never run
            state = torch.load(path, map_location=self.cfg.device, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["opt"])
            self.step, self.spent, self.counts = int(state["step"]), float(state["spent"]), dict(state["counts"])
            self.best, self.log, self.curve = state["best"], list(state["log"]), list(state.get("curve", []))
            torch.set_rng_state(state["torch_rng"])
        except Exception as e:  # noqa: BLE001 - any defect in the file is the same one-line error
            raise ValueError(
                f"{path}: is not a training state this version can resume "
                f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
                "pass --restart to start over"
            ) from None
        # The log holds exactly the evaluations the state knows: a kill between appending a line and
        # saving the state would otherwise leave that line twice after the resumed run logs it again.
        write_atomic(self.out / "log.jsonl", "".join(json.dumps(e) + "\n" for e in self.log).encode())
        return True

    # -- one step ----------------------------------------------------------------------------------
    def picks(self, step: int) -> list[Example]:
        """The batch of ``step``: drawn from (seed, step, rank) alone, so a resumed run draws the same."""
        rng = random.Random((self.cfg.seed * 1_000_003 + step) * 64 + self.dist.rank)
        keys = list(self.train)
        return [rng.choice(self.train[k]) for k in (rng.choice(keys) for _ in range(self.cfg.batch))]

    def _load(self, step: int):
        examples = self.picks(step)
        return examples, frames_of(examples, self.cfg.frames)

    def batch(self) -> tuple[list[Example], np.ndarray]:
        """This step's examples and frames (decoded in the background during the previous step)."""
        t = time.perf_counter()
        if self._next is None or self._next[0] != self.step:
            self._next = (self.step, self._pool.submit(self._load, self.step))
        examples, frames = self._next[1].result()
        self._next = (self.step + 1, self._pool.submit(self._load, self.step + 1))
        self.wait += time.perf_counter() - t
        for ex in examples:
            self.counts[group_key(ex, self.cfg.balance)] += 1
        return examples, frames

    def autocast(self):
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.cfg.device.startswith("cuda"))

    def logits(self, examples: list[Example], frames: np.ndarray, shuffle: bool) -> torch.Tensor:
        with self.autocast():  # the vision tower runs without gradients when frozen; the connector always trains
            feats = self.model.encode_images(self.prep(frames), train_vision=self.train_vision)
        feats = feats.reshape(len(examples), self.cfg.frames, *feats.shape[1:])
        rng = random.Random(self.cfg.seed * 7_919 + self.step)  # option orders: also from (seed, step)
        orders = []
        for ex in examples:
            order = list(range(len(ex.rec["actions"])))
            if shuffle:
                rng.shuffle(order)  # one model for any option order
            orders.append(order)
        enc = self.model.encode([ex.rec["question"] for ex in examples], self.cfg.frames, orders)
        with self.autocast():
            return self.model(feats, enc).float()

    def progress(self) -> float:
        return max(self.step / self.total, self.spent / (self.cfg.max_minutes * 60))

    def train_step(self) -> float:
        t = time.perf_counter()
        self.model.train()
        examples, frames = self.batch()
        logits = self.logits(examples, frames, shuffle=True)
        loss = training_loss(logits, targets_of(examples, logits.shape[1]).to(logits.device), self.cfg.spherical_weight)
        for group, base in zip(self.opt.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * lr_factor(self.progress())
        self.opt.zero_grad()
        loss.backward()
        self.dist.average_gradients(self.params)
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.step += 1
        self.busy += time.perf_counter() - t
        return loss.item()

    @torch.no_grad()
    def evaluate(self, groups: dict[str, list[Example]] | None = None) -> dict:
        per_game = {}
        for key, examples in (groups if groups is not None else self.val).items():
            picked = examples[:: max(1, len(examples) // self.cfg.eval_records)][: self.cfg.eval_records]
            lg, lb, _ = self._scored(picked)
            per_game[key] = {
                "accuracy": (lg.argmax(-1) == lb).float().mean().item(),
                "nll": nll(lg, lb),
                "ece": expected_calibration_error(lg, lb),
                "records": len(lb),
            }
        entry = {
            "step": self.step,
            "minutes": round(self.spent / 60, 3),
            "games": per_game,
            "nll": float(np.mean([g["nll"] for g in per_game.values()])) if per_game else None,
        }
        return entry

    def play_check(self) -> dict:
        """Play up to three training games for three 400-decision episodes through laya-eval (seeds
        500000+); the score is the mean normalised score against the reference baselines."""
        from laya_eval.evaluate import RunConfig, play_game
        from laya_policy.play import LayaPolicy

        ckpt = save_checkpoint(self.model, self.agent_config(), self.out / ".play-check")
        policy = LayaPolicy(str(ckpt), device=self.cfg.device)
        games = sorted({k.split("/")[0] for k in self.train})[:3]
        run = RunConfig(
            policy="laya", games=games, episodes=3, cap=400, seed_base=PLAY_CHECK_SEED_BASE, random_episodes=0
        )
        scores = {g: play_game(run, g, policy) for g in run.games}
        values = [r["normalised"] for r in scores.values() if r.get("normalised") is not None]
        return {
            "score": float(np.mean(values)) if values else None,
            "games": {g: {"mean": r["mean"], "normalised": r.get("normalised")} for g, r in scores.items()},
        }

    def better(self, entry: dict) -> bool:
        if self.cfg.select_by == "play":
            score = entry["play"]["score"]
            return score is not None and (self.best is None or score > self.best["play"])
        return self.best is None or entry["nll"] < self.best["nll"]

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, progress: bool = True) -> dict:
        from tqdm import tqdm

        resumed = self.resume()
        if not resumed and self.dist.main:
            (self.out / "log.jsonl").unlink(missing_ok=True)  # a fresh run starts a fresh log
        cfg = self.cfg
        budget, start, last_state = cfg.max_minutes * 60, time.monotonic() - self.spent, time.monotonic()
        done_evals = len(self.log)
        bar = tqdm(
            total=self.total,
            initial=self.step,
            desc="train",
            unit="step",
            disable=None if progress and self.dist.main else True,
        )
        while not self.dist.any(self.step >= self.total or time.monotonic() - start >= budget):
            if cfg.crash_at_step is not None and self.step == cfg.crash_at_step and not resumed:
                raise CrashForTesting(f"--crash-at-step {cfg.crash_at_step}")
            loss = self.train_step()
            self.spent = time.monotonic() - start
            self._losses.append(loss)
            if len(self._losses) == 20:
                self.curve.append([self.step, round(float(np.mean(self._losses)), 5)])
                self._losses = []
            bar.update(1)
            rate = self.step * cfg.batch * self.dist.world / max(self.busy, 1e-9) if self.busy else 0.0
            left = max(0.0, min(budget - self.spent, (self.total - self.step) * self.busy / max(1, self.step)))
            bar.set_postfix(loss=f"{loss:.3f}", samples_s=f"{rate:.0f}", left=f"{left / 60:.1f}min")
            if (
                self.val
                and self.dist.main
                and (self.progress() >= (done_evals + 1) / cfg.evals or self.step == self.total)
            ):
                done_evals = min(cfg.evals, math.floor(self.progress() * cfg.evals + 1e-9))
                self.record(self.evaluate())
                self.save_state()
                last_state = time.monotonic()
            elif self.dist.main and time.monotonic() - last_state > max(
                120.0, cfg.state_minutes * 60, 20 * self._save_s
            ):
                self.save_state()
                last_state = time.monotonic()
        bar.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        agree = self.dist.agree(self.model)
        if not self.dist.main:
            return {}
        if not self.log or self.log[-1]["step"] != self.step:  # stopped by the clock: evaluate the last weights
            if self.val:
                self.record(self.evaluate())
        self.save_state()
        summary = self.finish()
        summary["replicas"] = {"world": self.dist.world, "weights_agree": agree}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary

    def record(self, entry: dict) -> None:
        """Log an evaluation (printed as a table) and keep the best checkpoint by the selection rule."""
        if self.cfg.select_by == "play":
            entry["play"] = self.play_check()
        self.log.append(entry)
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        print_eval(entry)
        if self.better(entry):
            self.best = {"step": self.step, "nll": entry["nll"], "select_by": self.cfg.select_by}
            if "play" in entry:
                self.best["play"] = entry["play"]["score"]
            save_checkpoint(self.model, self.agent_config(), self.out / "best")

    @torch.no_grad()
    def _scored(self, examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits, labels, targets) of ``examples``, padded to the most options with impossible ones."""
        self.model.eval()
        logits, labels, targets = [], [], []
        for i in range(0, len(examples), self.cfg.batch):
            chunk = examples[i : i + self.cfg.batch]
            lg = self.logits(chunk, frames_of(chunk, self.cfg.frames), shuffle=False).cpu()
            logits.append(torch.where(torch.isinf(lg), torch.full_like(lg, -1e9), lg))
            labels.append(torch.tensor([ex.rec["label"] for ex in chunk]))
            targets.append(targets_of(chunk, lg.shape[1]))
        k = max(lg.shape[1] for lg in logits)
        return (
            torch.cat([torch.nn.functional.pad(x, (0, k - x.shape[1]), value=-1e9) for x in logits]),
            torch.cat(labels),
            torch.cat([torch.nn.functional.pad(t, (0, k - t.shape[1])) for t in targets]),
        )

    def agent_config(self, temperature: float = 1.0) -> AgentConfig:
        """What the checkpoint restores: a continued checkpoint's own fields (interpolation, head shape,
        revision), with this run's temperature."""
        from dataclasses import replace

        base = self.start or AgentConfig(backbone=self.cfg.backbone)
        return replace(
            base,
            image_size=self.cfg.image_size,
            preprocess=self.cfg.preprocess,
            frames=self.cfg.frames,
            temperatures={"choice": temperature},
        )

    def finish(self) -> dict:
        """Fit the temperature and write ``final/``.

        The fit uses held-out episodes of the training games (their val split, never trained on; or the
        ``calibrate_on`` games' val split): the episodes alternate between a fit half, where T minimises
        the soft cross-entropy against the training target (the label where a record has none), and a
        report half, where ECE is measured before and after. When raw ECE on the report half is already
        below 0.05 the starting temperature is kept (1, or the ``init_from`` checkpoint's).
        """
        start_t = float(self.start.temperatures.get("choice", 1.0)) if self.start else 1.0
        temperature, calib = start_t, {}
        holdout = load_groups(self.cfg, "val", self.cfg.calibrate_on) if self.cfg.calibrate_on else self.val
        examples = [ex for key in sorted(holdout) for ex in holdout[key]]
        if examples:
            fit, report = _halves(examples)
            (fit_logits, fit_labels, fit_targets), (rep_logits, rep_labels, _) = self._scored(fit), self._scored(report)
            raw = expected_calibration_error(rep_logits / start_t, rep_labels)
            calib = {
                "ece_before": raw,
                "holdout": sorted(holdout),
                "fit_records": len(fit),
                "report_records": len(report),
                "start_temperature": start_t,
            }
            if raw < 0.05:
                calib["skipped"] = "ECE already below 0.05"
            else:
                temperature = fit_temperature(fit_logits, fit_labels, fit_targets)
                calib.update(
                    temperature=temperature, ece_after=expected_calibration_error(rep_logits / temperature, rep_labels)
                )
        from laya_policy.data import data_kind

        training = {k: v for k, v in asdict(self.cfg).items() if k in TRAINING_KEYS} | {
            "model": self.cfg.backbone,
            "model_on_hub": self.cfg.pretrained and not Path(self.cfg.backbone).exists(),
            "data_on_hub": data_kind(self.cfg.data) == "hub",
            "freeze": "none" if self.train_vision else "vision",
            "lrs": {"head": self.base_lrs[0], "backbone": self.base_lrs[1]},
            "steps_done": self.step,
            "minutes": round(self.spent / 60, 3),
            "groups": sorted(self.train),
            "calibration": calib,
        }
        save_checkpoint(self.model, self.agent_config(temperature), self.out / "final", training)
        steps_s = self.step / max(self.busy, 1e-9)
        return {
            "steps": self.step,
            "minutes": round(self.spent / 60, 3),
            "best": self.best,
            "calibration": calib,
            "samples_per_group": self.counts,
            "curve": self.curve,
            "samples_per_s": round(steps_s * self.cfg.batch * self.dist.world, 2),
            "data_wait_share": round(self.wait / max(self.busy, 1e-9), 4),
        }


def _halves(examples: list[Example], most: int = 512) -> tuple[list[Example], list[Example]]:
    """(fit, report), both holding every (game, source): within each, whole episodes alternate between
    the two halves, or its records alternate when it has a single episode. Each half at most ``most``
    records, evenly spread."""
    groups: dict[tuple, list[Example]] = {}
    for ex in examples:
        groups.setdefault((ex.rec["game"], ex.rec["source"]), []).append(ex)
    halves: list[list[Example]] = [[], []]
    for _, group in sorted(groups.items()):
        episodes = sorted({ex.rec["episode"] for ex in group})
        if len(episodes) >= 2:
            side = {e: i % 2 for i, e in enumerate(episodes)}
            for ex in group:
                halves[side[ex.rec["episode"]]].append(ex)
        else:
            halves[0] += group[0::2]
            halves[1] += group[1::2]
    return tuple(h[:: max(1, len(h) // most)][:most] for h in halves)


def print_eval(entry: dict) -> None:
    print(f"\nstep {entry['step']} ({entry['minutes']:.1f} min): mean validation NLL {entry['nll']:.3f}")
    print(f"  {'group':<24} {'accuracy':>8} {'NLL':>7} {'ECE':>6} {'records':>7}")
    for key, g in entry["games"].items():
        print(f"  {key:<24} {g['accuracy']:>8.3f} {g['nll']:>7.3f} {g['ece']:>6.3f} {g['records']:>7}")
    if "play" in entry:
        print(f"  play check: {entry['play']}")


def train(cfg: TrainConfig, progress: bool = True) -> dict:
    return Run(cfg).run(progress)
