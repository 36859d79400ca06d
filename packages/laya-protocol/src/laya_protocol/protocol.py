"""The evaluation protocol: how an Atari episode is played, stored with data and with scores.

A dataset's meta.json and a laya-eval results file both carry this record, so a score and the
baselines it is normalised by can be traced to the same emulator settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: Press FIRE once after reset and once after each lost life (episode not over), for games whose
#: action set contains FIRE; these presses are not decisions, but their rewards count.
AUTO_FIRE_RULE = "reset_and_life_loss"
AUTO_FIRE_RULES = (AUTO_FIRE_RULE, "none")  # what a protocol's auto_fire may say: the rule, or no presses

#: ALE v5's own episode limit, in emulator frames.
FRAME_CAP = 108_000
#: Decisions at frameskip 4 within the frame limit: the generator's default (no cap of its own).
DATA_DECISION_CAP = FRAME_CAP // 4
#: The evaluation's decision cap. Baselines are also reported after this many decisions, so that
#: a capped evaluation is normalised by scores measured under the same cap.
EVAL_DECISION_CAP = 4_500
BASELINE_CAP = EVAL_DECISION_CAP

STICKY_ACTIONS = 0.25  # the ALE recommendation (Machado et al. 2018), the v5 default
FRAMESKIP = 4


@dataclass(frozen=True)
class Protocol:
    env_id: str
    repeat_action_probability: float = STICKY_ACTIONS
    frameskip: int = FRAMESKIP
    action_set: str = "minimal"
    max_frames_per_episode: int = FRAME_CAP
    decision_cap: int | None = EVAL_DECISION_CAP
    auto_fire: str = AUTO_FIRE_RULE

    @classmethod
    def ale_v5(cls, game: str, **overrides) -> Protocol:
        """The ALE v5 defaults for ``game``, with the evaluation's decision cap unless overridden."""
        return cls(env_id=f"ALE/{game}-v5", **overrides)

    def auto_fires(self, game: str) -> bool:
        """Whether the auto-FIRE rule presses FIRE in ``game``: the rule is on and the game's minimal
        action set has FIRE (the full set always lists it: Freeway or MsPacman must get no presses),
        whichever set the policy chooses among."""
        from laya_protocol.games import minimal_actions

        return self.auto_fire == AUTO_FIRE_RULE and "FIRE" in minimal_actions(game)

    def to_dict(self) -> dict:
        return asdict(self)
