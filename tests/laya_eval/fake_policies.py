"""Policies that misbehave on purpose, or record what they were shown (for laya-eval's tests)."""

import time

import numpy as np


class Recorder:
    def __init__(self, action: int = 0):
        self.action, self.batches, self.resets = action, [], []

    def reset(self, game, actions):
        self.resets.append((game, tuple(actions)))

    def __call__(self, batch):
        self.batches.append(
            (batch.frames.copy(), batch.prev_frames.copy(), batch.new_episode.copy(), batch.episodes.copy())
        )
        return np.full(len(batch), self.action)


def raising(**_):
    def policy(batch):
        raise RuntimeError("model exploded")

    return policy


def out_of_range(**_):
    return lambda batch: np.full(len(batch), 99)


def nan_probs(**_):
    return lambda batch: np.full((len(batch), len(batch.actions)), np.nan)


def wrong_batch(**_):
    return lambda batch: np.zeros(len(batch) + 1, dtype=int)


def fails_on(game="Breakout", **_):
    def policy(batch):
        if batch.game == game:
            raise ValueError(f"cannot play {game}")
        return np.zeros(len(batch), dtype=int)

    return policy


def probs(prefer=1, **_):
    def policy(batch):
        p = np.full((len(batch), len(batch.actions)), 0.1)
        p[:, prefer] = 1.0
        return p

    return policy


def slow(seconds=0.05, **_):
    def policy(batch):
        time.sleep(seconds)
        return np.zeros(len(batch), dtype=int)

    return policy


def brightest_column(**_):
    """The rule of stdio_policy.c, in-process: FIRE on a screen equal to its previous one (when the
    game has FIRE), else toward the brightest column of the lower half, else action 0."""

    def policy(batch):
        names = list(batch.actions)
        out = []
        for cur, prev in zip(batch.frames, batch.prev_frames, strict=True):
            if "FIRE" in names and np.array_equal(cur, prev):
                out.append(names.index("FIRE"))
                continue
            lower = cur[cur.shape[0] // 2 :].astype(np.int64).sum(axis=(0, 2))
            target = int(np.argmax(lower)) / cur.shape[1]
            if target < 0.45 and "LEFT" in names:
                out.append(names.index("LEFT"))
            elif target > 0.55 and "RIGHT" in names:
                out.append(names.index("RIGHT"))
            else:
                out.append(0)
        return np.asarray(out)

    return policy


# -- hostile in their own ways (an outside review's cases): each must fail its game, or the run, on one line


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for this one")


class _Zero:
    def __call__(self, batch):
        return np.zeros(len(batch), dtype=int)


def reset_raises(**_):
    class P(_Zero):
        def reset(self, game, actions):
            raise ValueError("reset failed")

    return P()


def unprintable(**_):
    def policy(batch):
        raise _Unprintable()

    return policy


def array_raises(**_):
    class NotAnArray:
        def __array__(self, *args, **kwargs):
            raise _Unprintable()

    return lambda batch: NotAnArray()


def exits(**_):
    def policy(batch):
        raise SystemExit(0)

    return policy


def close_raises(**_):
    class P(_Zero):
        def close(self):
            raise RuntimeError("close failed")

    return P()


def identity_raises(**_):
    class P(_Zero):
        @property
        def identity(self):
            raise RuntimeError("identity failed")

    return P()


def identity_not_json(**_):
    class P(_Zero):
        identity = {"w": np.float32(1.0), "n": float("nan")}

    return P()


def changes_directory(scratch=".", **_):
    import os

    def policy(batch):
        os.chdir(scratch)
        return np.zeros(len(batch), dtype=int)

    return policy


def identity_exits(**_):
    class P(_Zero):
        @property
        def identity(self):
            raise SystemExit(0)

    return P()


def moves_away(folder=".", **_):
    """Changes the working directory at its first decision (a relative --out must not follow it)."""
    import os

    def policy(batch):
        os.chdir(folder)
        return np.zeros(len(batch), dtype=int)

    return policy


def waits_on(game="Breakout", go="", **_):
    """Action 0, but ``game``'s reset waits until the file ``go`` exists: a run caught in the middle."""
    from pathlib import Path

    class P(_Zero):
        def reset(self, name, actions):
            while name == game and not Path(go).exists():
                time.sleep(0.02)

    return P()
