"""What a policy is given and what it must answer: the :class:`Batch` of decisions to make, the
check of its answer (:func:`choose`), and :class:`PolicyError` when it misbehaves. In-process
policies, the stdio bridge and the ViZDoom loop all share these."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from laya_protocol.choices import distribution
from laya_protocol.errors import cause


@dataclass
class Batch:
    """The decisions to make now, one row per episode that needs one."""

    game: str
    actions: tuple[str, ...]
    frames: np.ndarray  # uint8 [n, 210, 160, 3]: the current screens
    prev_frames: np.ndarray  # uint8 [n, 210, 160, 3]: the previous decisions' screens (a copy of the
    #                           current one on an episode's first decision and after an auto-FIRE)
    new_episode: np.ndarray  # bool [n]: the episode's first decision
    episodes: np.ndarray  # int [n]: which episode of the game each row belongs to
    platform: str = "ale"  # or "vizdoom" (screens are then 240 x 320)

    def __len__(self) -> int:
        return len(self.frames)


MAX_IDENTITY = 64 << 10  # bytes of a policy's identity, as the results file writes it
SAID = 200  # characters of what a policy says (an error, an identity) that a message of the judge's quotes


class PolicyError(Exception):
    """The policy misbehaved: raised, hung, or answered out of range. Recorded per game."""


def asked(call, *args, what: str = ""):
    """``call(*args)`` of a third-party policy, whatever it raises made one PolicyError (``what``
    says which call: ``"reset "``); a PolicyError of its own, such as the stdio bridge's, as it is."""
    try:
        return call(*args)
    except PolicyError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a third-party policy may raise anything
        raise PolicyError(f"{what}raised {cause(e)}") from None


def choose(out, batch: Batch, greedy: bool, rng: np.random.Generator) -> np.ndarray:
    """Validate a policy's answer and turn it into one action index per row."""
    n, a = len(batch), len(batch.actions)
    try:
        arr = np.asarray(out)
    except Exception as e:  # noqa: BLE001 - anything that is not array-like
        raise PolicyError(f"returned {type(out).__name__}, not an array ({cause(e)})") from None
    if arr.dtype.kind in "iu" and arr.shape == (n,):
        bad = arr[(arr < 0) | (arr >= a)]
        if bad.size:
            raise PolicyError(
                f"returned action {int(bad[0])}, out of range for {a} actions ({', '.join(batch.actions)})"
            )
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and arr.shape == (n, a):
        if not np.isfinite(arr).all():
            raise PolicyError(f"returned non-finite probabilities {arr[~np.isfinite(arr).all(1)][0].tolist()}")
        if (arr < 0).any() or (arr.max(1) <= 0).any():  # max, not sum: 1e308s sum past a float
            row = arr[((arr < 0).any(1)) | (arr.max(1) <= 0)][0]
            raise PolicyError(f"returned invalid probabilities {row.tolist()} (negative or all zero)")
        if greedy:
            return arr.argmax(1)
        p = distribution(arr)
        u = rng.random(n)[:, None]
        return np.minimum((p.cumsum(1) < u).sum(1), a - 1)
    raise PolicyError(
        f"returned shape {arr.shape} ({arr.dtype}) for a batch of {n}; expected {n} action indices "
        f"or {n}x{a} probabilities"
    )
