"""How episodes are played: the record stored in every results file.

Its keys are the same as the protocol record atari-data stores in a dataset's meta.json, so a
score and the baselines it is normalised by can be checked to come from the same rules.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

AUTO_FIRE_RULE = "reset_and_life_loss"
FRAME_CAP = 108_000


@dataclass(frozen=True)
class EvalProtocol:
    env_id: str
    repeat_action_probability: float = 0.25
    frameskip: int = 4
    action_set: str = "minimal"
    max_frames_per_episode: int = FRAME_CAP
    decision_cap: int | None = 4_500
    auto_fire: str = AUTO_FIRE_RULE

    @classmethod
    def ale_v5(cls, game: str, decision_cap: int | None = 4_500) -> EvalProtocol:
        return cls(env_id=f"ALE/{game}-v5", decision_cap=decision_cap)

    def to_dict(self) -> dict:
        return asdict(self)
