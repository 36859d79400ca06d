"""The question a policy is asked each step: the single home of its wording.

Training data and play ask exactly the same question, so everything that needs it imports
:func:`game_question` (:func:`atari_question` for ALE games); nothing rewrites it.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_GOAL = "Score as many points as possible."

# What the player controls and wants, for games where the screen alone is ambiguous.
GOALS: dict[str, str] = {
    "Breakout": "Keep the ball in play with the paddle at the bottom and break as many bricks as you can.",
    "Pong": "You control the right paddle; return the ball and get it past your opponent.",
    "Freeway": "You are the chicken on the left; cross the road upward while avoiding the cars.",
    "SpaceInvaders": "You are the cannon at the bottom; shoot the aliens and dodge their shots.",
    "Skiing": "Ski down the course, passing between each pair of flags.",
    "Boxing": "You are the white boxer; get close to your opponent and punch.",
    "MsPacman": "Eat the dots and avoid the ghosts.",
    "Pacman": "Eat the dots and avoid the ghosts.",
    "Enduro": "Drive forward and pass the other cars without crashing.",
    "DoomBasic": "Kill the monster: line the crosshair up with it, then shoot; every missed shot costs points.",
}

_MOVES = {"UP": "up", "DOWN": "down", "LEFT": "left", "RIGHT": "right"}
# ViZDoom buttons.
_BUTTONS = {
    "MOVE_LEFT": "strafe left",
    "MOVE_RIGHT": "strafe right",
    "ATTACK": "shoot",
    "TURN_LEFT": "turn left",
    "TURN_RIGHT": "turn right",
    "MOVE_FORWARD": "move forward",
    "MOVE_BACKWARD": "move backward",
}


def action_label(name: str) -> str:
    """A short plain-English label for an ALE action or ViZDoom button; unknown names fall back to lower case."""
    if name in _BUTTONS:
        return _BUTTONS[name]
    if name == "NOOP":
        return "do nothing"
    if name == "FIRE":
        return "press fire (launch the ball / shoot)"
    fire = name.endswith("FIRE") and name != "FIRE"
    stem = name[: -len("FIRE")] if fire else name
    if stem in _MOVES:
        return f"move {_MOVES[stem]}" + (" and fire" if fire else "")
    for vertical in ("UP", "DOWN"):
        rest = stem[len(vertical) :]
        if stem.startswith(vertical) and rest in ("LEFT", "RIGHT"):
            v, h = _MOVES[vertical], _MOVES[rest]
            return f"move {v}-{h} and fire" if fire else f"move {v} and {h}"
    return name.lower()


def format_option(key: str, label: str) -> str:
    """How one option is shown to the model."""
    return f"{key}: {label}"


#: How each platform's game is named in the question; ALE's is the upstream wording.
PLATFORMS = {"ale": "the Atari game", "browser": "the browser game", "vizdoom": "the Doom scenario"}


def game_question(game: str, actions: Sequence[str], platform: str = "ale") -> dict:
    """The question for one decision in ``game`` with options ``actions`` (in that order).

    Returns ``{"action": {"type": "choice", "instructions": ..., "criteria": {name: label}}}``;
    records store the inner ``["action"]`` value.
    """
    goal = GOALS.get(game, DEFAULT_GOAL)
    where = PLATFORMS.get(platform, "the game")
    instructions = f"You are playing {where} {game}. {goal} Which action should you take now?"
    return {
        "action": {
            "type": "choice",
            "instructions": instructions,
            "criteria": {name: action_label(name) for name in actions},
        }
    }


def atari_question(game: str, actions: Sequence[str]) -> dict:
    """The question for an ALE game (see :func:`game_question`)."""
    return game_question(game, actions, "ale")
