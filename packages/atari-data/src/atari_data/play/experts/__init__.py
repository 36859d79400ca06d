"""Experts: policies that give a probability distribution over a game's minimal action set.

An expert sees a :class:`atari_data.play.ale.AtariGame` (its RAM, and for checkpoint experts its
recent raw screens) and returns probabilities in the game's minimal-set order.
"""

from atari_data.play.experts.base import Expert, expert_id, is_planner, load_expert

__all__ = ["Expert", "expert_id", "is_planner", "load_expert"]
