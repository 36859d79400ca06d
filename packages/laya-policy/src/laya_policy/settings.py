"""The settings of `laya-policy train` and `laya-policy quickstart`, each field one flag, and the
rules for `push`'s flags.

They live apart from the code that runs them (laya_policy.train, laya_policy.quickstart,
laya_policy.push), which needs torch: the command line is parsed, its help written and a value no
run takes refused from these alone, at once rather than after torch's import.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from atari_data.play.experts.builtin import BUILTIN
from laya_policy.presets import (
    CNN,
    CNN_IMAGE_SIZE,
    INPUTS,
    MOTION,
    MOTION_GAIN,
    PRESET_IMAGE_SIZE,
    PRESETS,
    SMOLVLM,
    check_size,
)
from laya_protocol.config import listed, option
from laya_protocol.protocol import EVAL_DECISION_CAP

#: (head, backbone) learning rates when none is given. A random preset trains everything: its head
#: needs 1e-3 to move, and at 1e-3 its vision tower loses what the random features already tell apart.
#: The reference CNN has no backbone: the head rate is the whole network's.
DEFAULT_LRS: dict[str, tuple[float, float | None]] = {
    "pretrained": (1e-4, 2e-5),
    "tiny": (1e-3, 1e-4),
    CNN: (5e-4, None),
}


def _lrs(i: int) -> str:
    return ", ".join(
        f"{f'{pair[i]:.0e}'.replace('e-0', 'e-')} {kind}" for kind, pair in DEFAULT_LRS.items() if pair[i] is not None
    )


FREEZES = ("auto", "vision", "none")  # --freeze; a run records what auto resolved to (train.Setup.freeze)


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
        f"tiny (random weights, built here), a Hub id such as {SMOLVLM} (ORG/NAME@REVISION pins a branch, tag "
        "or commit), a local directory, or cnn "
        "(the reference student: a Nature-DQN-sized CNN, not a VLM; see laya_policy.cnn)",
        shown="--init-from's backbone, else tiny",
    )
    init_from: str | None = option(None, "checkpoint to continue from (e.g. after a DAgger round)")
    cnn_inputs: str | None = option(
        None,
        f"the cnn's input channels: the newest frame and its motion ({MOTION_GAIN:g}x the newest minus the "
        "previous), or each frame as its own channel (the form before the motion input, for comparisons)",
        choices=INPUTS,
        shown=f"--init-from's, else {MOTION}",
    )
    image_size: int | None = option(
        None,
        "frame side in pixels",
        shown=f"--init-from's, else the pretrained backbone's vision config, else {PRESET_IMAGE_SIZE} for a preset, "
        f"{CNN_IMAGE_SIZE} for cnn",
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
        "time budget, resumed runs included: the run stops early when it is spent (the learning-rate "
        "schedule follows the step count alone, so a busy machine changes how far a run gets, not its curve)",
    )
    threads: int | None = option(None, "torch intra-op threads per process", shown="1 on a CPU, torch's own on a GPU")
    processes: int = option(
        1,
        "data-parallel processes to start here, each with its own --batch (on a CPU one a core is the "
        "fastest form measured); under torchrun leave it at 1",
    )
    screen_cache_mb: float = option(2048.0, "memory for screens kept resized (MiB); the rest are resized per use")
    balance: str = option("game", "what sampling balances over", choices=("game", "game_source"))
    freeze: str = option(
        "auto",
        "auto: the vision tower is frozen for a pretrained backbone, trained for tiny",
        choices=FREEZES,
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
    seed: int = option(0, "seeds the weights a run starts from and the batches it draws")
    device: str = option("cpu", "torch device, e.g. cuda")
    restart: bool = option(False, "start over instead of resuming OUT/state.pt")
    crash_at_step: int | None = option(None, "raise once at this step (to exercise resuming)")
    calibrate_on: list[str] | None = option(
        None,
        "games whose val split fits the temperature (not trained on)",
        shown="the training games' own held-out val episodes; ECE is reported on records the fit did not use "
        "(other episodes; alternate records where a game has one)",
    )

    def __post_init__(self):
        listed(self)

    def check(self) -> None:
        """Refuse a flag's value that no run takes, and one the model named by ``model`` does not take:
        what needs no file and no torch, so the command line answers before it imports them. What a
        checkpoint continued from decides (``init_from``) is checked when it is read (train.resolve)."""
        if not self.out.strip():  # an unset shell variable: the run's files would land among the user's own
            raise ValueError("--out: is empty; give the folder to train in")
        if self.processes > 1 and "WORLD_SIZE" in os.environ:
            raise ValueError(f"--processes {self.processes}: torchrun started this process already; leave it out")
        checks: tuple[tuple[str, object, bool, str], ...] = (
            (
                "--threads",
                self.threads,
                self.threads is None or self.threads >= 1,
                "1 or more (leave it out for one per CPU process)",
            ),
            ("--steps", self.steps, self.steps is None or self.steps >= 1, "1 or more (leave it out to use --passes)"),
            ("--batch", self.batch, self.batch >= 1, "1 or more"),
            ("--processes", self.processes, self.processes >= 1, "1 or more"),
            ("--evals", self.evals, self.evals >= 1, "1 or more"),
            ("--passes", self.passes, self.passes > 0 and math.isfinite(self.passes), "a number above 0"),
            ("--max-minutes", self.max_minutes, self.max_minutes > 0, "a number of minutes above 0"),  # NaN fails too
            ("--lr-head", self.lr_head, self.lr_head is None or 0 < self.lr_head < math.inf, "a rate above 0"),
            (
                "--lr-backbone",
                self.lr_backbone,
                self.lr_backbone is None or 0 < self.lr_backbone < math.inf,
                "a rate above 0",
            ),
        )
        for flag, value, ok, what in checks:
            if not ok:
                raise ValueError(f"{flag} {value}: expected {what}")
        if self.init_from:
            return
        preset = PRESETS.get(self.model or "tiny")
        if preset and self.image_size is not None and (self.image_size < 1 or self.image_size % preset.token_side):
            raise ValueError(
                f"--image-size {self.image_size}: expected a positive multiple of {preset.token_side} for "
                f"{self.model or 'tiny'} ({preset.patch_size}-pixel patches, merged "
                f"{preset.scale_factor}x{preset.scale_factor} into one image token)"
            )
        if self.model == CNN:
            if self.preprocess == "processor":
                raise ValueError("--preprocess processor: the cnn reads the device-side resize only (gpu)")
            if self.freeze == "vision" or self.lr_backbone is not None:
                flag = "--freeze vision" if self.freeze == "vision" else "--lr-backbone"
                raise ValueError(f"{flag}: the cnn has no backbone (it trains as one network at --lr-head)")
            if self.image_size is not None:
                check_size(self.image_size)

    @property
    def backbone(self) -> str:
        """The backbone's name: ``model``, or the one the ``init_from`` checkpoint was built on."""
        if self.model:  # resolve() sets it, so a resolved config reads no file
            return self.model
        from laya_policy.checkpoint import load_config  # torch: only where a checkpoint is read

        return load_config(self.init_from).backbone if self.init_from else "tiny"

    @property
    def pretrained(self) -> bool:
        return self.backbone not in PRESETS and self.backbone != CNN  # these start from random weights

    @property
    def kind(self) -> str:
        """Which default learning rates apply: pretrained, tiny (any preset) or cnn."""
        return CNN if self.backbone == CNN else "pretrained" if self.pretrained else "tiny"


#: The experts' random moves in the quickstart's data: 0.3, and 0.5 in Pong (docs/learning-on-a-cpu.md).
EPSILON, PONG_EPSILON = 0.3, 0.5


@dataclass
class QuickstartConfig:
    """The whole pipeline's settings; each field is one flag of `laya-policy quickstart`."""

    out: str = option("runs/quickstart", "run folder")
    games: list[str] = option(
        help=f"comma-separated, among the built-in experts' games ({', '.join(sorted(BUILTIN))})",
        factory=lambda: ["Freeway", "Boxing", "Breakout", "Pong"],
    )
    train_frames: int = option(5_000, "train records per game")
    val_frames: int = option(200, "val records per game")
    decision_cap: int = option(1_000, "decisions per generated episode (more, shorter episodes)")
    baseline_episodes: int = option(
        2,
        "expert and random episodes measured into meta.json at --decision-cap (and at 4,500 decisions where it "
        "reaches them) and given to the judge, which normalises with these where measured at its --cap, else with "
        "laya-eval's reference table where that is, else with these, flagged as another cap; 0: the reference "
        "table only",
    )
    epsilon: str | None = option(
        None,
        "probability of a uniform random move while the experts play the data, and a game's own after it, "
        f"P[,GAME=P...] (atari-data generate --epsilon; the others {EPSILON} when only games are given): more "
        "of the states a student's own mistakes lead to; with Pong's at 0.5 the greedy median rose on two "
        "seeds of three (docs/learning-on-a-cpu.md)",
        shown=f"{EPSILON}, Pong {PONG_EPSILON} when Pong is played",
    )
    model: str = option("tiny", "tiny, a Hub id, a local directory, or cnn (the reference student, not a VLM)")
    image_size: int | None = option(
        None, "frame side in pixels", shown=f"the backbone's; {PRESET_IMAGE_SIZE} for tiny, {CNN_IMAGE_SIZE} for cnn"
    )
    batch: int = option(16, "training batch, per process")
    processes: int | None = option(
        None,
        "data-parallel training processes (laya-policy train --processes), each with --batch: fixed, not one a core, "
        "so the run is the same on any machine",
        shown="2 on a CPU, 1 on a GPU",
    )
    steps: int = option(
        5_000, "training steps: the schedule's length (12 minutes for tiny in two processes on two CPU cores)"
    )
    minutes: float = option(
        60.0,
        "a safety stop for training; the schedule follows --steps, so a run that finishes them (on a busy "
        "machine too) gives the same weights",
    )
    episodes: int = option(5, "evaluation episodes per game")
    sample: bool = option(
        False,
        "judge by drawing each move from the policy's probabilities (laya-eval --sample), not its top choice: "
        "the tiny VLM's median moved either way across seeds, the CNN scored less "
        "(docs/learning-on-a-cpu.md)",
    )
    cap: int = option(EVAL_DECISION_CAP, "evaluation decisions per episode at most (the protocol's)")
    video_decisions: int = option(300, "decisions in the report's video")
    device: str = option("cpu", "torch device")
    workers: int = option(2, "generation processes")
    seed: int = option(0, "seeds the data, the weights and the batches: the same seed, the same run")
    restart: bool = option(False, "delete OUT, a quickstart's run folder (never another folder), and start over")

    def __post_init__(self):
        from atari_data.produce.generate import epsilon_flag, parse_epsilon

        listed(self)
        # --epsilon as one text, the games' names as given: what settings.json holds and a rerun compares
        if self.epsilon is None:  # Pong's own where Pong is played: the quickstart of Freeway has none
            own = {"Pong": PONG_EPSILON} if "pong" in {g.lower() for g in self.games} else {}
            self.epsilon = epsilon_flag(EPSILON, own)
        else:
            every, own = parse_epsilon(str(self.epsilon))
            self.epsilon = epsilon_flag(EPSILON if every is None else every, own)


#: A license id as the Hub's card metadata takes one (apache-2.0, cc-by-4.0, other).
LICENSE_RE = re.compile(r"[a-z0-9][a-z0-9.+-]*")


def check_push(repo: str, revision: str | None, license: str) -> None:
    """Refuse `push`'s flags the Hub would: before a repo is made ('a..b', 'x--y' failed only at upload)."""
    from atari_data.publish.repo import BRANCH_RE, BRANCH_RULE, hub_id_problem

    if problem := hub_id_problem(repo):
        raise ValueError(f"--repo {problem}; expected a Hub model id ORG/NAME")
    if revision is not None and not BRANCH_RE.match(revision):
        raise ValueError(f"--revision {revision!r}: expected a branch name ({BRANCH_RULE})")
    if not LICENSE_RE.fullmatch(license):  # the card's metadata: the Hub takes an id, not prose
        raise ValueError(f"--license {license!r}: expected a Hub license id such as apache-2.0, mit or other")
