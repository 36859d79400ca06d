"""Episode numbers by role, so that no two roles ever play the same episode.

Data generators number episodes from these starts and derive every ALE seed and behaviour random
stream from (seed, game, episode number); laya-eval seeds episode i with ``EVAL_SEED_BASE + i``
(the default of ``--seed-base``), far from every range data uses.
"""

from __future__ import annotations

VAL_EPISODES_FROM = 1_000
TRAIN_EPISODES_FROM = 2_000
EVAL_SEED_BASE = 100_000
PLAY_CHECK_SEED_BASE = 200_000  # laya-policy's play checks during training, apart from the final evaluation's
DAGGER_EPISODES_FROM = 300_000
DAGGER_ROUND_STRIDE = 10_000
IMPORTED_VAL_FROM = 500_000
#: The last DAgger round whose episodes stay below the imported rows' numbers.
MAX_DAGGER_ROUND = (IMPORTED_VAL_FROM - DAGGER_EPISODES_FROM) // DAGGER_ROUND_STRIDE - 1
EXPERT_BASELINE_FROM = 900_000
RANDOM_BASELINE_FROM = 950_000
MAX_SEED = 2**31 - 1  # ALE takes a seed as a signed 32-bit integer
MAX_EPISODES = 10_000  # a judge's episodes of one game at most: they run side by side, one emulator each


def episodes_problem(episodes: int) -> str | None:
    """Why ``episodes`` side by side cannot be played, or None."""
    return None if 1 <= episodes <= MAX_EPISODES else f"{episodes} (expected 1 to {MAX_EPISODES:,})"


def seed_problem(seed_base: int, episodes: int) -> str | None:
    """Why the seeds of episodes ``seed_base`` .. ``seed_base + episodes - 1`` are not ALE seeds, or None
    (``episodes`` checked by :func:`episodes_problem` first)."""
    if not 0 <= seed_base <= MAX_SEED - episodes + 1:
        return f"{seed_base}: expected 0 to {MAX_SEED - episodes + 1:,} (ALE seeds are 32-bit, one per episode)"
    return None


#: (role, first episode number, how the rest follow), for help texts and docs.
RANGES: tuple[tuple[str, int, str], ...] = (
    ("val episodes (generate, DAgger, ViZDoom)", VAL_EPISODES_FROM, "+ i"),
    ("train episodes (generate, DAgger, ViZDoom)", TRAIN_EPISODES_FROM, "+ i"),
    ("evaluation (laya-eval --seed-base)", EVAL_SEED_BASE, "+ i"),
    ("play checks while training (laya-policy)", PLAY_CHECK_SEED_BASE, "+ i"),
    (
        "DAgger episodes",
        DAGGER_EPISODES_FROM,
        f"+ {DAGGER_ROUND_STRIDE} * round + episode, round 1-{MAX_DAGGER_ROUND}",
    ),
    ("imported val/test rows", IMPORTED_VAL_FROM, "+ i"),
    ("expert baseline", EXPERT_BASELINE_FROM, "+ i"),
    ("random baseline", RANDOM_BASELINE_FROM, "+ i"),
)


def dagger_round_problem(round_: int) -> str | None:
    """Why ``round_`` is no DAgger round the seed ranges hold (past ``MAX_DAGGER_ROUND`` its episodes
    would be the imported rows'), or None."""
    if 1 <= round_ <= MAX_DAGGER_ROUND:
        return None
    return f"DAgger round {round_}: expected 1 to {MAX_DAGGER_ROUND} (the rounds the seed ranges hold)"


def episodes_room(first: int, dagger: bool = False) -> int:
    """How many episodes numbered from ``first`` (val's or train's) a source holds before the next
    role's numbers; in a DAgger round, before the next round's."""
    if first < TRAIN_EPISODES_FROM:
        return TRAIN_EPISODES_FROM - first
    end = DAGGER_ROUND_STRIDE if dagger else min(start for _, start, _ in RANGES if start > first)
    return end - first


def dagger_episode(round_: int, episode: int) -> int:
    """The episode number a DAgger round's ALE seed derives from. A round's episodes are numbered as
    generate's (val from ``VAL_EPISODES_FROM``, train from ``TRAIN_EPISODES_FROM``), so one past the
    round's stride would be the next round's: refused, not played twice; so is a round
    :func:`dagger_round_problem` refuses."""
    if problem := dagger_round_problem(round_):
        raise ValueError(problem)
    if not 0 <= episode < DAGGER_ROUND_STRIDE:
        raise ValueError(
            f"DAgger round {round_}: episode {episode} would take a seed of round {round_ + 1}'s; a round "
            f"plays at most {episodes_room(TRAIN_EPISODES_FROM, dagger=True):,} train episodes (lower --train-frames "
            "or --min-train-episodes, or raise --decision-cap)"
        )
    return DAGGER_EPISODES_FROM + DAGGER_ROUND_STRIDE * round_ + episode


def table() -> str:
    """The ranges as aligned text lines."""
    width = max(len(role) for role, _, _ in RANGES)
    return "\n".join(f"{role:<{width}}  {first:>7,} {rule}" for role, first, rule in RANGES)
