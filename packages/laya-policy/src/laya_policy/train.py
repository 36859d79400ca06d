"""Train the choice policy on atari-data records, durably. Reads top to bottom: the config checked
and filled in (its fields are in laya_policy.settings, which the command line reads without torch),
the data, the model and its optimiser, one step, evaluation, durability, then the loop in ``train``.

A run lives in ``out``: ``state.pt`` (weights, optimiser, step, random states, per-group sample
counts, best record, log, time spent) is written to a temporary name and renamed after every
evaluation and every ``state_minutes``; the same command again resumes from it (the time budget
counts time already spent; each batch and option order is drawn from (seed, step), so a resumed
run draws what an uninterrupted one would have); ``restart`` starts over. The step count is fixed
before the first step (``steps``, or ``passes`` over the training records), and so are the
learning-rate curve and the evaluation steps: the result depends on the data and the seed, not
on how busy the machine is.
``log.jsonl`` holds one line per evaluation; ``best/`` is the checkpoint with the lowest
validation NLL; ``final/`` the last one, calibrated.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from atari_data.errors import AtariDataError
from atari_data.layout import PACK_SWAPPER, FolderPin, fresh_file, list_games, put_back, staged, write_atomic
from atari_data.limits import check_torch_zip, open_regular
from atari_data.publish.repo import data_kind
from atari_data.schema import target_of
from laya_policy.backbone import build_backbone, hub_reference
from laya_policy.checkpoint import (
    BEST,
    CONFIG,
    FINAL,
    HUB_REF_RE,
    TEMPERATURES,
    TRAINING,
    AgentConfig,
    load_config,
    load_whole,
    on_hub,
    read_json_file,
    replaceable,
    resolve_checkpoint,
    save_checkpoint,
)
from laya_policy.cnn import NatureCNN
from laya_policy.data import Example, load_examples
from laya_policy.distributed import Distributed, check_device, launch, set_threads
from laya_policy.imageprep import ImagePrep
from laya_policy.inputs import Prefetch, ScreenCache, draw
from laya_policy.model import ChoicePolicy
from laya_policy.objectives import (
    accuracy,
    expected_calibration_error,
    fit_temperature,
    majority_share,
    nll,
    training_loss,
)
from laya_policy.presets import CNN, CNN_IMAGE_SIZE, MOTION, PRESET_IMAGE_SIZE, PRESETS
from laya_policy.settings import DEFAULT_LRS, TrainConfig
from laya_protocol import files
from laya_protocol.errors import cause, signals_held
from laya_protocol.files import writing
from laya_protocol.games import FULL_ACTIONS
from laya_protocol.locks import FileLock
from laya_protocol.seeds import PLAY_CHECK_SEED_BASE

#: A run folder's own files beside its checkpoints: the evaluations, one JSON line each; what the
#: run did, written at its end; and where a cut-off run resumes from.
LOG_FILE, SUMMARY_FILE, STATE_FILE = "log.jsonl", "summary.json", "state.pt"


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill frames, image size and preprocessing from the checkpoint continued from (a different value
    given is an error: the checkpoint was trained on its own), else from the pretrained backbone's
    vision config (which fixes its image tokens), else the preset defaults. Before any work is done."""
    from dataclasses import replace

    from laya_policy.backbone import pretrained_image_size

    cfg.check()
    check_device(cfg.device)
    if cfg.processes > 1 and cfg.device.startswith("cuda") and cfg.processes > torch.cuda.device_count():
        raise ValueError(
            f"--processes {cfg.processes}: one process a GPU, and this machine has {torch.cuda.device_count()}"
        )
    if cfg.model and (Path(cfg.model) / CONFIG).is_file():  # a whole policy, not a backbone
        raise ValueError(f"--model {cfg.model}: is a laya-policy checkpoint; continue from it with --init-from")
    given = {
        "model": cfg.model,
        "frames": cfg.frames,
        "image_size": cfg.image_size,
        "preprocess": cfg.preprocess,
        "cnn_inputs": cfg.cnn_inputs,
    }
    ckpt = None
    if cfg.init_from:
        init_from = str(resolve_checkpoint(cfg.init_from))  # a Hub id is fetched once, here
        cfg = replace(cfg, init_from=init_from)
        ckpt = asdict(load_config(init_from))
        ckpt["model"] = ckpt["backbone"]
    if cfg.cnn_inputs is not None and (ckpt["model"] if ckpt else cfg.model) != CNN:
        raise ValueError(f"--cnn-inputs {cfg.cnn_inputs}: only the cnn takes it (--model cnn)")
    if ckpt:
        for key, value in given.items():
            if value is not None and value != ckpt[key]:
                raise ValueError(
                    f"--{key.replace('_', '-')} {value} differs from the {ckpt[key]} that {cfg.init_from} "
                    "was trained with; leave it out to follow the checkpoint"
                )
        return replace(cfg, **{k: ckpt[k] for k in given})
    cfg = replace(cfg, model=cfg.model or "tiny")
    size = PRESET_IMAGE_SIZE if cfg.image_size is None else cfg.image_size
    if cfg.model == CNN:  # its flags were checked in cfg.check()
        cfg = replace(cfg, cnn_inputs=cfg.cnn_inputs or MOTION)
        size = CNN_IMAGE_SIZE if cfg.image_size is None else cfg.image_size
    if cfg.pretrained:
        if not (Path(cfg.backbone).is_dir() or HUB_REF_RE.match(cfg.backbone)):  # asked of no Hub, so at once
            raise ValueError(
                f"--model {cfg.backbone}: not a preset ({', '.join([*PRESETS, CNN])}), a folder or a Hub id ORG/NAME"
            )
        native, patch = pretrained_image_size(cfg.backbone)
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


class PlanChanged(ValueError):
    """A resume whose flags or data would change the run's steps, batches or schedule."""


# -- data ------------------------------------------------------------------------------------------


def group_key(ex: Example, balance: str) -> str:
    """The balancing group of an example: its game, or ``game/source``."""
    game, source = ex.group
    return game if balance == "game" else f"{game}/{source}"


def group_game(key: str) -> str:
    """The game of a balancing group's key (:func:`group_key`)."""
    return key.split("/", 1)[0]


def not_ready(cfg: TrainConfig) -> list[str]:
    """The layout's games that ``cfg`` asks for and readers ignore for now: being written (between
    a swap and its _READY), or left so by a stopped writer."""
    if data_kind(cfg.data) != "layout":
        return []
    return [
        f"{g.source}/{g.game}" for g in list_games(cfg.data, cfg.sources, cfg.games, ready_only=False) if not g.ready
    ]


def load_groups(cfg: TrainConfig, split: str, games: list[str] | None = None) -> dict[str, list[Example]]:
    """Examples by balancing group (:func:`group_key`)."""
    groups: dict[str, list[Example]] = {}
    for ex in load_examples(cfg.data, split, cfg.sources, games or cfg.games):
        groups.setdefault(group_key(ex, cfg.balance), []).append(ex)
    return {k: v for k, v in sorted(groups.items()) if v}


def targets_of(examples: list[Example], k: int) -> torch.Tensor:
    """[B, k]: each record's distribution over its options, zero past them."""
    t = torch.zeros(len(examples), k)
    for i, ex in enumerate(examples):
        d = target_of(ex.rec)
        t[i, : len(d)] = torch.tensor(d)
    return t


# -- the model and its optimiser ---------------------------------------------------------------------


def records_digest(groups: dict[str, list[Example]]) -> str:
    """SHA-256 of every record of ``groups``, in their order: what their text says (labels, targets,
    ids and frame names), not their frames' pixels."""
    import hashlib

    digest = hashlib.sha256()
    for key, examples in groups.items():
        digest.update(json.dumps([key, [ex.rec for ex in examples]], sort_keys=True, default=str).encode())
    return digest.hexdigest()


def lr_factor(progress: float, warmup: float = 0.03, floor: float = 0.1) -> float:
    """Linear warm-up over the first 3% of the steps, then cosine down to 10%. ``progress`` is steps
    done / steps planned: the curve is the same however busy the machine is (``max_minutes`` only
    stops a run early, wherever on the curve it is)."""
    if progress < warmup:
        return max(progress, 1e-3) / warmup
    progress = (progress - warmup) / (1 - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def decays(name: str, p: torch.Tensor) -> bool:
    """Weight decay applies to weight matrices only: not to norms, biases, embeddings or the head's
    learned positions, which decay pulls towards zero for no gain in generalisation."""
    return p.ndim >= 2 and "embed" not in name and not name.endswith("image_position")


@dataclass
class Setup:
    """What a run trains and reads, built once before the first step."""

    cfg: TrainConfig
    frames: int  # the resolved config's frames, image size and preprocessing
    image_size: int
    preprocess: str
    dist: Distributed
    model: ChoicePolicy | NatureCNN
    opt: torch.optim.Optimizer
    lrs: dict[str, float]  # before the schedule, by part: head (the whole CNN) and backbone
    base_lrs: list[float]  # the same per optimiser group
    params: list[torch.nn.Parameter]
    train_vision: bool
    screens: ScreenCache
    train: dict[str, list[Example]]  # this process's share of each group
    group_sizes: dict[str, int]  # each group's records over all the processes
    val: dict[str, list[Example]]
    total: int  # the step count
    start: AgentConfig | None  # the checkpoint continued from
    start_fingerprint: str | None  # its weights' fingerprint: what a resume must continue from too
    records: str  # a digest of every training record: what a resume must train on too
    threads: int

    @property
    def freeze(self) -> str:
        """What is frozen, as --freeze names it."""
        return "none" if self.train_vision else "vision"


def build(cfg: TrainConfig) -> Setup:
    """The model (built, or continued from ``init_from``), its optimiser and the data, for a resolved
    config; raises ValueError before any work when there is nothing to train on."""
    if cfg.frames is None or cfg.image_size is None or cfg.preprocess is None:
        raise ValueError("build() takes a resolved config: resolve(cfg) first")
    frames, image_size, preprocess = cfg.frames, cfg.image_size, cfg.preprocess
    dist = Distributed(cfg.device)
    threads = set_threads(cfg.threads, cfg.device)
    torch.manual_seed(cfg.seed)
    start, start_fingerprint = None, None
    model: ChoicePolicy | NatureCNN
    if cfg.init_from:  # its config and weights one checkpoint's, while another run may be replacing it
        _, model, start, start_fingerprint = load_whole(cfg.init_from, cfg.device)
    elif cfg.backbone == CNN:
        model = NatureCNN(frames, image_size, cfg.cnn_inputs or MOTION).to(cfg.device)
    else:
        backbone, tokenizer = build_backbone(cfg.backbone, image_size=image_size, seed=cfg.seed)
        model = ChoicePolicy(backbone, tokenizer).to(cfg.device)
    freeze = cfg.freeze if cfg.freeze != "auto" else ("vision" if cfg.pretrained else "none")
    if isinstance(model, ChoicePolicy):
        for p in model.backbone.vision_model.parameters():
            p.requires_grad_(freeze == "none")

    default_head, default_body = DEFAULT_LRS[cfg.kind]
    lr_head = cfg.lr_head or default_head
    lr_body = (cfg.lr_backbone or default_body or 0.0) * math.sqrt(cfg.batch / 16)
    lrs = {"head": lr_head} | ({"backbone": lr_body} if isinstance(model, ChoicePolicy) else {})
    groups: list[dict] = []
    for part, lr in (("head", lr_head), ("backbone", lr_body)):
        named = [
            (n, p)
            for n, p in model.named_parameters()
            if p.requires_grad and n.startswith("backbone.") == (part == "backbone")
        ]
        groups += [
            {"params": [p for n, p in named if decays(n, p)], "lr": lr, "weight_decay": 0.01},
            {"params": [p for n, p in named if not decays(n, p)], "lr": lr, "weight_decay": 0.0},
        ]
    # fused: one kernel over all the parameters. On a CPU torch's default walked the tiny preset's 106
    # tensors one op at a time (5-8 ms a step against 1.5 ms fused, tools/bench/train.py)
    opt = torch.optim.AdamW([g for g in groups if g["params"]], fused=True)

    # A packed folder is read in parts (train, then val; a config at a time): one a pack --force
    # replaced meanwhile gave a run one pack's train records and the other's, in silence
    pin = FolderPin(Path(cfg.data)) if data_kind(cfg.data) == "packed" else None
    try:
        whole = load_groups(cfg, "train")
        sizes = {k: len(v) for k, v in whole.items()}  # each group's records over all the processes
        if thin := [(k, n) for k, n in sorted(sizes.items()) if n < dist.world]:
            k, n = thin[0]
            raise ValueError(
                f"{cfg.data}: training group {k} has {n} training record{'s' * (n != 1)}, fewer than the "
                f"{dist.world} processes (each draws from its own share of every group); use fewer processes"
            )
        val = load_groups(cfg, "val") if dist.main else {}
        if pin is not None and not pin.same():
            raise pin.replaced("read", "train", PACK_SWAPPER)
    finally:
        if pin is not None:
            pin.close()
    train = {k: v[dist.rank :: dist.world] for k, v in whole.items()}
    waiting = not_ready(cfg)
    if not train:
        raise ValueError(
            f"{cfg.data}: no training records for sources {cfg.sources or 'all'} and games {cfg.games or 'all'}"
            + (
                f"; {', '.join(waiting)} {'is' if len(waiting) == 1 else 'are'} not ready (no _READY)"
                if waiting
                else ""
            )
        )
    for flag, asked, key in (("--sources", cfg.sources, "source"), ("--games", cfg.games, "game")):
        held = {ex.rec[key] for group in whole.values() for ex in group} if asked else set()
        if lacking := [a for a in asked or () if a not in held]:  # else trained on the rest, in silence
            raise ValueError(
                f"{cfg.data}: {flag} {lacking[0]}: no training records"
                + (f" ({', '.join(waiting)} not ready: no _READY)" if waiting else "")
            )
    if waiting and dist.main:  # being written, or left so by a stopped writer: said, not passed over
        print(
            f"warning: {cfg.data}: {', '.join(waiting)} {'is' if len(waiting) == 1 else 'are'} not ready (no "
            "_READY); the run trains without it",
            file=sys.stderr,
        )
    if cfg.calibrate_on and dist.main:  # checked now: after training it silently left final/ at T = 1
        held = {ex.rec["game"] for group in load_groups(cfg, "val", cfg.calibrate_on).values() for ex in group}
        if missing := [g for g in cfg.calibrate_on if g not in held]:
            which = "that game" if len(missing) == 1 else "those games"
            raise ValueError(
                f"--calibrate-on {','.join(missing)}: no val records of {which} in {cfg.data} "
                f"(sources {cfg.sources or 'all'})"
            )
    if isinstance(model, NatureCNN):
        offered = {a for group in (*train.values(), *val.values()) for ex in group for a in ex.rec["actions"]}
        if other := sorted(offered - set(FULL_ACTIONS)):
            raise ValueError(f"{cfg.data}: the cnn scores ALE buttons only; the data offers {', '.join(other)}")
    records = sum(sizes.values())  # all the processes must plan the same steps
    total = cfg.steps or max(1, math.ceil(cfg.passes * records / (cfg.batch * dist.world)))
    prep = ImagePrep(image_size, preprocess, device=cfg.device)
    return Setup(
        cfg=cfg,
        frames=frames,
        image_size=image_size,
        preprocess=preprocess,
        dist=dist,
        model=model,
        opt=opt,
        lrs=lrs,
        base_lrs=[g["lr"] for g in opt.param_groups],
        params=[p for g in opt.param_groups for p in g["params"]],
        train_vision=freeze == "none",
        screens=ScreenCache(prep, frames, cfg.screen_cache_mb),
        train=train,
        group_sizes=sizes,
        val=val,
        total=total,
        start=start,
        start_fingerprint=start_fingerprint,
        records=records_digest(whole),
        threads=threads,
    )


# -- one step ----------------------------------------------------------------------------------------


def autocast(cfg: TrainConfig):
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.device.startswith("cuda"))


def logits_of(s: Setup, examples: list[Example], pixels: torch.Tensor, order_seed: int | None) -> torch.Tensor:
    """Option logits [B, K] for ``examples`` given their normalised screens. With ``order_seed`` the
    options are shown in an order drawn from it (one model for any option order), else in order."""
    with autocast(s.cfg):  # the vision tower runs without gradients when frozen; the connector always trains
        feats = s.model.encode_images(pixels, train_vision=s.train_vision)
    feats = feats.reshape(len(examples), s.frames, *feats.shape[1:])
    rng = random.Random(order_seed)
    orders = []
    for ex in examples:
        order = list(range(len(ex.rec["actions"])))
        if order_seed is not None:
            rng.shuffle(order)
        orders.append(order)
    enc = s.model.encode([ex.rec["question"] for ex in examples], s.frames, orders)
    with autocast(s.cfg):
        return s.model(feats, enc).float()


def optimise(s: Setup, examples: list[Example], pixels: torch.Tensor, step: int) -> float:
    """One optimiser step on a batch at ``step`` of the run; returns its loss."""
    s.model.train()
    logits = logits_of(s, examples, pixels, order_seed=s.cfg.seed * 7_919 + step)
    loss = training_loss(logits, targets_of(examples, logits.shape[1]).to(logits.device), s.cfg.spherical_weight)
    for group, base in zip(s.opt.param_groups, s.base_lrs, strict=True):
        group["lr"] = base * lr_factor(step / s.total)
    s.opt.zero_grad()
    loss.backward()
    s.dist.average_gradients(s.params)
    torch.nn.utils.clip_grad_norm_(s.params, 1.0, foreach=True)
    s.opt.step()
    return loss.item()


@torch.no_grad()
def scored(s: Setup, examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits, labels, targets) of ``examples``, options in order, padded to the most options with
    impossible ones."""
    s.model.eval()
    logits, labels, targets = [], [], []
    for i in range(0, len(examples), s.cfg.batch):
        chunk = examples[i : i + s.cfg.batch]
        lg = logits_of(s, chunk, s.screens(chunk), order_seed=None).cpu()
        logits.append(torch.where(torch.isinf(lg), torch.full_like(lg, -1e9), lg))
        labels.append(torch.tensor([ex.rec["label"] for ex in chunk]))
        targets.append(targets_of(chunk, lg.shape[1]))
    k = max(lg.shape[1] for lg in logits)
    return (
        torch.cat([torch.nn.functional.pad(x, (0, k - x.shape[1]), value=-1e9) for x in logits]),
        torch.cat(labels),
        torch.cat([torch.nn.functional.pad(t, (0, k - t.shape[1])) for t in targets]),
    )


def evaluate(s: Setup, groups: dict[str, list[Example]]) -> dict[str, dict]:
    """Accuracy, the majority label's share, NLL and ECE per group on up to ``eval_records`` evenly
    spread records of each."""
    per_group = {}
    for key, examples in groups.items():
        picked = evenly(examples, s.cfg.eval_records)
        lg, lb, _ = scored(s, picked)
        per_group[key] = {
            "accuracy": accuracy(lg, lb),
            "majority": majority_share(lb),
            "nll": nll(lg, lb),
            "ece": expected_calibration_error(lg, lb),
            "records": len(lb),
        }
    return per_group


def play_check(s: Setup, out: Path) -> dict:
    """Play up to three training games for three 400-decision episodes through laya-eval (the
    play-check seeds); the score is the mean normalised score against the reference baselines."""
    from laya_eval.evaluate import RunConfig, play_game
    from laya_policy.play import LayaPolicy

    ckpt = save_checkpoint(s.model, agent_config(s), out / ".play-check")
    policy = LayaPolicy(str(ckpt), device=s.cfg.device)
    games = sorted({k.split("/")[0] for k in s.train})[:3]
    run = RunConfig(policy="laya", games=games, episodes=3, cap=400, seed_base=PLAY_CHECK_SEED_BASE, random_episodes=0)
    scores = {g: play_game(run, g, policy) for g in run.games}
    values = [r["normalised"] for r in scores.values() if r.get("normalised") is not None]
    return {
        "score": float(np.mean(values)) if values else None,
        "games": {g: {"mean": r["mean"], "normalised": r.get("normalised")} for g, r in scores.items()},
    }


def improves(entry: dict, best: dict | None, select_by: str) -> bool:
    """Whether an evaluation's checkpoint replaces ``best``, the best so far: a higher play-check
    score (an evaluation without one never does) or a lower validation NLL; of equals the first stays."""
    if select_by == "play":
        score = entry["play"]["score"]
        return score is not None and (best is None or score > best["play"])
    return best is None or entry["nll"] < best["nll"]


def agent_config(s: Setup, temperature: float | None = None) -> AgentConfig:
    """What the checkpoint restores: a continued checkpoint's own fields (interpolation, head shape,
    revision), with this run's temperature (``final/``'s, fitted), or the one it started from (1, or
    ``init_from``'s: ``best/`` and the play checks are not calibrated)."""
    from dataclasses import replace

    backbone, revision = hub_reference(s.cfg.backbone)  # ORG/NAME@REV: the id, as a card names it, and REV
    base = s.start or AgentConfig(backbone=backbone, revision=revision)
    if temperature is None:
        temperature = float(base.temperatures.get("choice", 1.0)) if s.start else 1.0
    return replace(
        base,
        image_size=s.image_size,
        preprocess=s.preprocess,
        frames=s.frames,
        temperatures={"choice": temperature},
        cnn_inputs=s.model.inputs if isinstance(s.model, NatureCNN) else base.cnn_inputs,
    )


# -- durability ----------------------------------------------------------------------------------------


def fresh_progress(s: Setup) -> dict:
    """What a run has done, as state.pt keeps it: plain numbers, strings, lists and dicts."""
    return {"step": 0, "spent": 0.0, "counts": dict.fromkeys(s.train, 0), "best": None, "log": [], "curve": []}


def plan(s: Setup) -> dict:
    """What fixes a run's steps, batches and schedule: a resume must find the same (the clock, the
    device and the threads may change)."""
    c = s.cfg
    return {  # in the order a refusal names the first difference: the process count changes the rest
        "world": s.dist.world,
        "steps": s.total,
        "batch": c.batch,
        "seed": c.seed,
        "model": c.backbone,
        "cnn_inputs": s.model.inputs if isinstance(s.model, NatureCNN) else None,
        "frames": s.frames,
        "image_size": s.image_size,
        "preprocess": s.preprocess,
        "data": c.data,
        "sources": c.sources,
        "games": c.games,
        "balance": c.balance,
        "groups": s.group_sizes,
        "lrs": s.lrs,
        "freeze": s.freeze,
        "init_from": s.start_fingerprint,  # the weights it started from, however their path is spelled
        "records": s.records,  # the records themselves: data regenerated at the same path and sizes differs
        "select_by": c.select_by,  # what best/ was kept by
    }


def diverged(out: Path, step: int, what: str) -> str:
    return (
        f"{out}: training diverged at step {step}: {what}; lower --lr-head or --lr-backbone "
        "(and pass --restart: its state.pt holds the weights before)"
    )


def save_state(s: Setup, out: Path, done: dict) -> float:
    """Write state.pt (to a temporary name, then renamed); returns the seconds it took."""
    t = time.monotonic()
    state = {
        "model": s.model.state_dict(),
        "opt": s.opt.state_dict(),
        **done,
        "plan": plan(s),
        "torch_rng": torch.get_rng_state(),
        "config": asdict(s.cfg),
    }
    # A stop is taken once the state is in place: inside torch.save it broke the zip writer (a
    # RuntimeError traceback, exit 1, where a stop ends on one line)
    with signals_held(), staged(out / f".{STATE_FILE}.tmp") as tmp:
        # a full disk: torch's zip writer raises a RuntimeError of its own over the OSError
        # writing outside the file: what the close flushes last fails there, and is named too
        with writing(out / STATE_FILE, foreign=(RuntimeError,)), fresh_file(tmp) as f:  # a planted link is replaced
            torch.save(state, f)
        os.replace(tmp, out / STATE_FILE)
    return time.monotonic() - t


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _progress_problem(state: dict, s: Setup) -> str | None:
    """What in a state's progress is not what :func:`save_state` writes for this run, or None: a step
    past the plan trained on for ever, a NaN time spent turned the budget off, a log entry without
    its step failed only at the first evaluation."""
    step, spent, counts, best = state.get("step"), state.get("spent"), state.get("counts"), state.get("best")
    log, curve = state.get("log"), state.get("curve", [])
    if type(step) is not int or not 0 <= step <= s.total:
        return f"step {str(step)[:40]} is not a step of this run's {s.total}"
    if not _finite(spent) or not 0 <= float(spent or 0) <= MAX_SPENT:
        return f"spent {str(spent)[:40]} is not a number of seconds (0 to {MAX_SPENT:,})"
    if not isinstance(counts, dict) or set(counts) != set(s.train) or not all(type(v) is int for v in counts.values()):
        return "counts are not one count per training group of this run"
    if best is not None and not (isinstance(best, dict) and _finite(best.get("nll")) and type(best.get("step")) is int):
        return "best is not an evaluation's step and NLL"
    if not isinstance(log, list) or not all(
        isinstance(e, dict) and type(e.get("step")) is int and _finite(e.get("nll")) for e in log
    ):
        return "log is not a list of evaluations, each with its step and NLL"
    if not isinstance(curve, list) or not all(
        isinstance(c, list) and len(c) == 2 and all(map(_finite, c)) for c in curve
    ):
        return "curve is not a list of [step, loss] pairs"
    try:
        json.dumps([log, best])  # plain data: the log is written back from it
    except (TypeError, ValueError):
        return "log is not plain data"
    model, mine = state.get("model"), s.model.state_dict()
    if isinstance(model, dict):  # missing keys are load_state_dict's to name
        for k, t in model.items():  # each shape first: the NaN check makes a view declaring billions dense
            if k not in mine:
                return f"model.{k} is not one of this model's weights"
            if not (torch.is_tensor(t) and t.shape == mine[k].shape and t.dtype == mine[k].dtype):
                return f"model.{k} is not a tensor of this model's shape {tuple(mine[k].shape)} and {mine[k].dtype}"
        floats = ((k, t) for k, t in model.items() if torch.is_tensor(t) and t.is_floating_point())
        if (bad := next((k for k, t in floats if not t.isfinite().all()), None)) is not None:  # NaN trains NaN
            return f"model.{bad} holds NaN or infinite weights"
    return None


MAX_SPENT = 10**9  # seconds a state may say its run took (31 years): no run wrote more


def _optimiser_problem(saved, opt: torch.optim.Optimizer) -> str | None:
    """What in a saved optimiser state does not fit ``opt``, or None. Checked before torch loads it:
    a stride-0 view declaring a billion numbers is stored as one, and the load makes it dense; the
    fused step trusts every moment to be a dense tensor of its parameter's shape and dtype (a scalar
    trained NaNs, a state mapped to another parameter crashed the process) and each step count to be
    a float."""
    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict):
        return "opt is not an optimiser's state"
    mine = opt.state_dict()["param_groups"]
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(mine) or not all(isinstance(g, dict) for g in groups):
        return "opt param_groups are not this run's"
    for i, (group, ours) in enumerate(zip(groups, mine, strict=True)):
        for key in ("params", *RUN_SETTINGS):  # the run's own, as its plan is: a file that differs is not its state
            value = group.get(key)
            if type(value) is not type(ours[key]) or value != ours[key]:
                return f"opt param_groups[{i}].{key} is {str(value)[:40]}, where this run's is {str(ours[key])[:40]}"
    params = dict(
        zip((i for g in mine for i in g["params"]), (p for g in opt.param_groups for p in g["params"]), strict=True)
    )
    for key, entry in saved["state"].items():
        if key not in params or not isinstance(entry, dict):
            return f"opt state {str(key)[:20]} is not one of this model's parameters"
        p = params[key]
        if set(entry) != {"step", "exp_avg", "exp_avg_sq"}:
            return f"opt state {key} holds {sorted(map(str, entry))[:4]}, not AdamW's step, exp_avg and exp_avg_sq"
        for name in ("exp_avg", "exp_avg_sq"):
            value = entry[name]
            if not isinstance(value, torch.Tensor) or value.shape != p.shape or value.dtype != p.dtype:
                return f"opt state {key} {name} is not a tensor of its parameter's shape and dtype"
            if not value.is_contiguous():  # the fused step walks memory in order: a view would be misread
                return f"opt state {key} {name} is a view (strides {value.stride()}), not a dense tensor"
            if not value.isfinite().all():
                return f"opt state {key} {name} holds NaN or infinite moments"
        step = entry["step"]
        if not (isinstance(step, torch.Tensor) and step.dim() == 0 and step.dtype in (torch.float32, torch.float64)):
            return f"opt state {key} step is not a scalar float tensor"
        if not (torch.isfinite(step) and step >= 0):
            return f"opt state {key} step is {step.item()}, not a count"
    return None


#: AdamW settings a resumed state must share with the run; the rest (the learning rate, which
#: follows the schedule, and how it steps: fused, foreach) are taken from the run, not the file.
RUN_SETTINGS = ("betas", "eps", "weight_decay", "amsgrad", "maximize", "capturable", "differentiable")


def resume(s: Setup, out: Path) -> dict | None:
    """The progress of ``out/state.pt`` with the model and optimiser restored from it, or None to
    start fresh (no state, or ``restart``)."""
    path = out / STATE_FILE
    if s.cfg.restart or not path.exists():
        return None
    try:  # tensors and plain containers only: a planted pickle is refused, never run
        with open_regular(path) as f:  # a FIFO would hold open() for ever
            check_torch_zip(f, file=str(path), field="(file)")
            state = torch.load(f, map_location=s.cfg.device, weights_only=True)
        saved, now = state.get("plan"), plan(s)
        if saved != now:
            key = next((k for k in now if not isinstance(saved, dict) or saved.get(k) != now[k]), "plan")
            if key == "records" and isinstance(saved, dict) and key in saved:
                raise PlanChanged(
                    f"{path}: {s.cfg.data} holds other training records than the run started on (generated or "
                    "packed again since?); pass --restart to start over on them"
                )
            if key == "init_from" and isinstance(saved, dict) and saved.get(key) and now[key]:
                raise PlanChanged(
                    f"{path}: the --init-from checkpoint holds other weights than the run started from "
                    f"(fingerprint {str(saved[key])[:12]}, now {now[key][:12]}): it was replaced since; pass "
                    "--restart to start over from it, or --init-from the checkpoint the run started from"
                )
            if isinstance(saved, dict) and key not in saved:
                raise PlanChanged(
                    f"{path}: was started by a laya-policy that did not record its {key}, so a resume cannot "
                    "tell whether this command continues it; pass --restart to start over"
                )
            was = saved.get(key) if isinstance(saved, dict) else None
            raise PlanChanged(
                f"{path}: was started with {key} {was!r}, this command gives {now[key]!r}; "
                "run the command that started it to resume, or pass --restart to start over"
            )
        problem = _progress_problem(state, s) or _optimiser_problem(state.get("opt"), s.opt)
        if problem:
            raise ValueError(problem)
        s.model.load_state_dict(state["model"])
        settings = [{k: v for k, v in g.items() if k != "params"} for g in s.opt.param_groups]
        s.opt.load_state_dict(state["opt"])  # takes the file's groups whole: the settings go back to the run's
        for group, ours in zip(s.opt.param_groups, settings, strict=True):
            group.update(ours)
        done = {
            "step": int(state["step"]),
            "spent": float(state["spent"]),
            "counts": dict(state["counts"]),
            "best": state["best"],
            "log": list(state["log"]),
            "curve": list(state.get("curve", [])),
        }
        torch.set_rng_state(state["torch_rng"])
    except PlanChanged:
        raise
    except Exception as e:  # noqa: BLE001 - any defect in the file is the same one-line error
        why = e.message if isinstance(e, AtariDataError) else cause(e)  # its file is the path named here
        raise ValueError(
            f"{path}: is not a training state this version can resume ({why}); pass --restart to start over"
        ) from None
    # The log holds exactly the evaluations the state knows: a kill between appending a line and
    # saving the state would otherwise leave that line twice after the resumed run logs it again.
    write_atomic(out / LOG_FILE, "".join(json.dumps(e) + "\n" for e in done["log"]).encode())
    return done


# -- the run -------------------------------------------------------------------------------------------

#: The files a run replaces (a fresh run deletes its log; every run writes its summary at the end),
#: with keys each JSON object in them has: what tells a run's own from someone else's of that name.
RUN_FILES = {LOG_FILE: ("step", "games"), SUMMARY_FILE: ("steps", "minutes")}
RUN_FILE_CAP = 64 * 2**20  # far above any run's: an evaluation line is a few hundred bytes a game


def written_by_a_run(path: Path) -> None:
    """Refuse to go on where ``path`` (one of RUN_FILES) is there and no training run wrote it: the
    run would delete or replace a user's file of that name. A link is replaced itself, never followed."""
    if not path.exists() or path.is_symlink():
        return
    keys = RUN_FILES[path.name]
    try:
        text = files.read_capped(path, RUN_FILE_CAP).decode("utf-8")
        if path.suffix == ".json":
            lines, cut = [text], ""
        else:  # a last line without its newline was cut short by a kill or a full disk: a resume rewrites it
            *lines, cut = text.split("\n")
        objects = [json.loads(line) for line in lines if line.strip()]
        ours = all(isinstance(o, dict) and all(k in o for k in keys) for o in objects)
        ours = ours and (not cut or cut.startswith('{"step": '))  # as json.dumps of an evaluation begins
    except (OSError, ValueError, files.Refused):  # unreadable, too large, not UTF-8 or not JSON
        ours = False
    if not ours:
        raise ValueError(
            f"{path}: is not written by a training run, and a run here would replace it: move it, or give another --out"
        )


def a_state(path: Path) -> None:
    """Refuse to go on where ``path`` is there and is not a state a run wrote (a torch zip): the run
    would replace it, --restart or not. Only its first bytes are read; a resume reads the rest."""
    if not path.exists() or path.is_symlink():
        return
    try:
        with open_regular(path) as f:
            ours = f.read(4) == b"PK\x03\x04"  # torch.save's zip
    except (OSError, AtariDataError):  # a folder, a FIFO, a device, unreadable
        ours = False
    if not ours:
        raise ValueError(
            f"{path}: is not a training state, and a run here would replace it: move it, or give another --out"
        )


def train(cfg: TrainConfig, progress: bool = True) -> dict:
    """Train as the module docstring says; returns the summary (also OUT/summary.json), or {} on the
    other ranks of a distributed run. One run writes OUT at a time: the first holds ``.OUT.lock``
    beside it, and a second is refused on one line naming its pid."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # a process this call started is importing the script that makes the call (spawn runs it as
        # __mp_main__): unguarded, the call runs again there, and would find --out locked by its starter
        raise SystemExit(
            "error: train() was called while a process multiprocessing started imports the script that calls "
            'it (each of --processes does): put the call under `if __name__ == "__main__":`'
        )
    cfg = resolve(cfg)
    out = Path(cfg.out)
    group_of_ours = "WORLD_SIZE" in os.environ and not torch.distributed.is_initialized()  # torchrun's process
    try:
        if int(os.environ.get("RANK", "0")) != 0:  # a distributed run's other ranks: rank 0 holds the lock
            return _train(cfg, out, progress)
        given = Path(os.path.abspath(out))  # '.' and '..' by the names of the folders they are
        folder = Path(os.path.realpath(out))  # the one the files go to: the kernel follows 'link/..' first
        if not folder.name or given.is_symlink():  # a link's lock would be its own, not the folder's
            raise ValueError(
                f"{out}: --out: is {'the root folder' if not folder.name else 'a symbolic link'}; "
                f"give the folder to train in{f' ({folder})' if folder.name else ''}"
            )
        for part in (BEST, FINAL):  # refused now, not at the first evaluation's save
            replaceable(folder / part)
        for name in RUN_FILES:
            written_by_a_run(folder / name)
        a_state(folder / STATE_FILE)
        folder.parent.mkdir(parents=True, exist_ok=True)  # the lock lies beside OUT
        with FileLock.beside(folder, str(out), lambda m, f: ValueError(f"{f}: --out: {m}")):
            if cfg.processes == 1:
                return _train(cfg, out, progress)
            launch(_train, (cfg, out, progress), cfg.processes)  # the lock held here covers them all
            return json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    finally:
        # the group this call started ends here, before Python's teardown, where gloo's objects of a group
        # still up sometimes aborted: torchrun then failed a run that had written everything
        if group_of_ours and torch.distributed.is_initialized():
            with contextlib.suppress(Exception):  # a failed teardown must not hide the run's own error
                torch.distributed.destroy_process_group()


def _train(cfg: TrainConfig, out: Path, progress: bool) -> dict:
    from tqdm import tqdm

    s = build(cfg)
    data_on_hub = data_kind(cfg.data) == "hub"  # now: the folder may be moved while it trains
    if s.dist.main:
        out.mkdir(parents=True, exist_ok=True)
        for part in (BEST, FINAL):  # a stop between a swap's two renames left the old one set aside
            put_back(out / part)

    done = resume(s, out)
    resumed = done is not None
    if done is None:
        done = fresh_progress(s)
        if s.dist.main:
            (out / LOG_FILE).unlink(missing_ok=True)  # a fresh run starts a fresh log
    evals = min(cfg.evals, s.total)  # more evaluations than steps would only repeat steps
    eval_steps = {math.ceil(s.total * i / evals) for i in range(1, evals + 1)} if s.val else set()

    def record(entry: dict) -> None:
        """Log an evaluation (and print it as a table); keep the best checkpoint by the selection rule."""
        if cfg.select_by == "play":
            entry["play"] = play_check(s, out)
        done["log"].append(entry)
        with writing(out / LOG_FILE), open(out / LOG_FILE, "a", encoding="utf-8") as f:  # named, flush included
            f.write(json.dumps(entry) + "\n")
        print_eval(entry)
        if improves(entry, done["best"], cfg.select_by):
            done["best"] = {"step": entry["step"], "nll": entry["nll"], "select_by": cfg.select_by}
            if "play" in entry:
                done["best"]["play"] = entry["play"]["score"]
            save_checkpoint(s.model, agent_config(s), out / BEST)

    def evaluation() -> dict:
        games = evaluate(s, s.val)
        nll_mean = float(np.mean([g["nll"] for g in games.values()])) if games else None
        if nll_mean is not None and not math.isfinite(nll_mean):  # log.jsonl and state.pt hold JSON numbers
            raise ValueError(diverged(out, done["step"], f"the validation NLL is {nll_mean}"))
        return {"step": done["step"], "minutes": round(done["spent"] / 60, 3), "games": games, "nll": nll_mean}

    feed = Prefetch(lambda step: (ex := draw(s.train, cfg.batch, cfg.seed, step, s.dist.rank), s.screens(ex)), s.total)
    budget = cfg.max_minutes * 60
    clock = time.monotonic() - done["spent"]  # the budget counts time spent before a resume
    busy, last_state, save_s, losses, first = 0.0, time.monotonic(), 0.0, [], done["step"]
    bar = tqdm(
        total=s.total,
        initial=done["step"],
        desc="train",
        unit="step",
        disable=None if progress and s.dist.main else True,
    )
    try:
        while not s.dist.any(done["step"] >= s.total or time.monotonic() - clock >= budget):
            if cfg.crash_at_step is not None and done["step"] == cfg.crash_at_step and not resumed:
                raise CrashForTesting(f"--crash-at-step {cfg.crash_at_step}")
            t = time.perf_counter()
            examples, pixels = feed.get(done["step"])
            for ex in examples:
                done["counts"][group_key(ex, cfg.balance)] += 1
            loss = optimise(s, examples, pixels, done["step"])
            if not math.isfinite(loss):  # NaN weights from here on: nothing later is worth writing
                raise ValueError(diverged(out, done["step"] + 1, f"the loss is {loss}"))
            done["step"] += 1
            busy += time.perf_counter() - t
            done["spent"] = time.monotonic() - clock
            losses.append(loss)
            if len(losses) == 20:  # the training curve: mean loss over each 20 steps
                done["curve"].append([done["step"], round(float(np.mean(losses)), 5)])
                losses = []
            bar.update(1)
            rate = (done["step"] - first) * cfg.batch * s.dist.world / max(busy, 1e-9)
            bar.set_postfix(loss=f"{loss:.3f}", samples_s=f"{rate:.0f}")
            if s.dist.main and done["step"] in eval_steps:
                record(evaluation())
                save_s = save_state(s, out, done)
                last_state = time.monotonic()
            elif s.dist.main and time.monotonic() - last_state > max(120.0, cfg.state_minutes * 60, 20 * save_s):
                save_s = save_state(s, out, done)  # saves stay under ~5% of wall time
                last_state = time.monotonic()
    finally:
        bar.close()
        feed.close()
    agree = s.dist.agree(s.model)
    if not s.dist.main:
        return {}
    if s.val and (not done["log"] or done["log"][-1]["step"] != done["step"]):
        record(evaluation())  # stopped by the clock: evaluate the last weights
    save_state(s, out, done)

    temperature, calibration = calibrate(s)
    training = {k: v for k, v in asdict(cfg).items() if k in TRAINING_KEYS} | {
        "model": cfg.backbone,
        "model_on_hub": _model_on_hub(cfg),
        "data_on_hub": data_on_hub,
        "freeze": s.freeze,
        "lrs": s.lrs,
        "threads": s.threads,
        "processes": s.dist.world,
        "steps_done": done["step"],
        "minutes": round(done["spent"] / 60, 3),
        "groups": sorted(s.train),
        "calibration": calibration,
    }
    save_checkpoint(s.model, agent_config(s, temperature), out / FINAL, training)
    summary = {
        "steps": done["step"],
        "planned_steps": s.total,
        "minutes": round(done["spent"] / 60, 3),
        "best": done["best"],
        "calibration": calibration,
        "samples_per_group": done["counts"],
        "curve": done["curve"],
        "samples_per_s": round((done["step"] - first) * cfg.batch * s.dist.world / max(busy, 1e-9), 2),
        "data_wait_share": round(feed.wait / max(busy, 1e-9), 4),
        "threads": s.threads,
        "screen_cache": {
            "mb": round(s.screens.used / 2**20, 1),
            "reserved_mb": round(s.screens.reserved / 2**20, 1),
            "hits": s.screens.hits,
            "misses": s.screens.misses,
        },
        "replicas": {"world": s.dist.world, "weights_agree": agree},
    }
    write_atomic(out / SUMMARY_FILE, (json.dumps(summary, indent=2) + "\n").encode())
    return summary


def _model_on_hub(cfg: TrainConfig) -> bool:
    """Whether the backbone came from the Hub (a card then names it as the base model): a continued
    checkpoint's says so in its training.json (its backbone's name may be a path on another machine)."""
    if not cfg.pretrained:
        return False
    if cfg.init_from:
        try:
            said = read_json_file(Path(cfg.init_from) / TRAINING)
        except ValueError:  # none, or not a run's: nothing says the backbone came from the Hub
            return False
        return isinstance(said, dict) and said.get("model_on_hub") is True
    return on_hub(cfg.backbone)


def calibrate(s: Setup) -> tuple[float, dict]:
    """The temperature for ``final/`` and what its fit measured.

    The fit uses held-out episodes of the training games (their val split, never trained on; or the
    ``calibrate_on`` games' val split): the episodes alternate between a fit half, where T minimises
    the soft cross-entropy against the training target (the label where a record has none), and a
    report half, where ECE is measured before and after. When raw ECE on the report half is already
    below 0.05 the starting temperature is kept (1, or the ``init_from`` checkpoint's).
    """
    cfg = s.cfg
    start_t = float(s.start.temperatures.get("choice", 1.0)) if s.start else 1.0
    holdout = load_groups(cfg, "val", cfg.calibrate_on) if cfg.calibrate_on else s.val
    examples = [ex for key in sorted(holdout) for ex in holdout[key]]
    fit, report = _halves(examples)
    if not fit or not report:  # nothing to fit on, or nothing to say how the fit did
        n = len(examples)
        why = f"{n} held-out record{'s' * (n != 1)}: no game has two, one to fit on and one to report on"
        print(f"calibration skipped: {why}; final/ keeps T = {start_t:g}")
        return start_t, {"skipped": why, "start_temperature": start_t}
    (fit_logits, fit_labels, fit_targets), (rep_logits, rep_labels, _) = scored(s, fit), scored(s, report)
    raw = expected_calibration_error(rep_logits / start_t, rep_labels)
    single = [f"{g}/{src}" for (g, src), group in _by_group(examples) if len(_episodes_of(group)) < 2]  # alternated
    calib: dict = {
        "ece_before": raw,
        "holdout": sorted(holdout),
        "report_from": f"alternate records of the one episode of {', '.join(single)}" if single else "other episodes",
        "fit_records": len(fit),
        "report_records": len(report),
        "start_temperature": start_t,
    }
    if raw < 0.05:
        calib["skipped"] = "ECE already below 0.05"
        return start_t, calib
    lo, hi = TEMPERATURES  # what a checkpoint may carry, so the saved one always loads
    temperature = min(max(fit_temperature(fit_logits, fit_labels, fit_targets), lo), hi)
    calib.update(temperature=temperature, ece_after=expected_calibration_error(rep_logits / temperature, rep_labels))
    return temperature, calib


def _halves(examples: list[Example], most: int = 512) -> tuple[list[Example], list[Example]]:
    """(fit, report), both holding every (game, source): within each, whole episodes alternate between
    the two halves, or its records alternate when it has a single episode. Each half at most ``most``
    records, evenly spread."""
    halves: list[list[Example]] = [[], []]
    for _, group in _by_group(examples):
        episodes = _episodes_of(group)
        if len(episodes) >= 2:
            side = {e: i % 2 for i, e in enumerate(episodes)}
            for ex in group:
                halves[side[ex.rec["episode"]]].append(ex)
        else:
            halves[0] += group[0::2]
            halves[1] += group[1::2]
    fit, report = (evenly(h, most) for h in halves)
    return fit, report


def _by_group(examples: list[Example]) -> list[tuple[tuple[str, str], list[Example]]]:
    """The examples by (game, source), in that order: what calibration halves, group by group."""
    groups: dict[tuple[str, str], list[Example]] = {}
    for ex in examples:
        groups.setdefault((ex.rec["game"], ex.rec["source"]), []).append(ex)
    return sorted(groups.items())


def _episodes_of(group: list[Example]) -> list:
    return sorted({ex.rec["episode"] for ex in group})


def evenly(items: list, most: int) -> list:
    """At most ``most`` of ``items``, evenly spaced from the first to the last, so items grouped in
    order (games, episodes) each keep their share."""
    if len(items) <= most:
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, most).round()]


def print_eval(entry: dict) -> None:
    print(f"\nstep {entry['step']} ({entry['minutes']:.1f} min): mean validation NLL {entry['nll']:.3f}")
    print(f"  {'group':<24} {'accuracy':>8} {'majority':>8} {'NLL':>7} {'ECE':>6} {'records':>7}")
    for key, g in entry["games"].items():
        print(
            f"  {key:<24} {g['accuracy']:>8.3f} {g['majority']:>8.3f} {g['nll']:>7.3f} {g['ece']:>6.3f} "
            f"{g['records']:>7}"
        )
    if "play" in entry:
        print(f"  play check: {entry['play']}")
