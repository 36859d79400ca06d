"""The evaluation protocol: how an episode is played, stored with data and with scores.

A dataset's meta.json and a results file both carry this record, so any number can be traced
back to the emulator settings that produced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: Press FIRE once after reset and once after each lost life (episode not over), for games
#: whose minimal set contains FIRE; these presses are not decisions but their rewards count.
AUTO_FIRE_RULE = "reset_and_life_loss"

#: Baselines are also reported after this many decisions (auto-FIRE presses not counted), the
#: evaluation's default decision cap.
BASELINE_CAP = 4_500


@dataclass(frozen=True)
class Protocol:
    env_id: str
    repeat_action_probability: float = 0.25
    frameskip: int = 4
    action_set: str = "minimal"
    max_frames_per_episode: int = 108_000
    decision_cap: int | None = 27_000
    auto_fire: str = AUTO_FIRE_RULE

    @classmethod
    def ale_v5(cls, game: str, **overrides) -> Protocol:
        """The ALE v5 defaults for ``game`` (the ALE-recommended sticky actions)."""
        return cls(env_id=f"ALE/{game}-v5", **overrides)

    def to_dict(self) -> dict:
        return asdict(self)
