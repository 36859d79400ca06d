"""The ViZDoom ``basic`` scenario as data and judge both play it, and its labels-buffer expert.

``basic`` is one room with one monster along the far wall; the player can strafe left, strafe
right or shoot (+106 for the kill, -5 per missed shot, -1 per tic, 300 tics at most). Screens are
320x240 RGB, one decision every 4 tics.

The expert reads ViZDoom's labels buffer: it ignores the player, puffs, blood and dead things,
takes the largest remaining box, shoots when that box covers the crosshair column (the screen's
centre, 2 px margin) and otherwise strafes toward the box's centre. With no box it has no answer
(``None``): data leaves such frames unlabelled, and the judge's expert baseline shoots.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

from laya_protocol.errors import UnknownName

#: scenario -> (ViZDoom config file, the game name records and results use)
SCENARIOS = {"basic": ("basic.cfg", "DoomBasic")}
SCENARIO = "basic"  # the one played when none is named
TICS_PER_DECISION = 4
IGNORED = ("DoomPlayer", "BulletPuff", "Blood", "Dead")
CROSSHAIR_MARGIN = 2


def game_name(scenario: str) -> str:
    if scenario not in SCENARIOS:
        raise UnknownName(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    return SCENARIOS[scenario][1]


def make_game(scenario: str = SCENARIO, seed: int | None = None):
    """A headless DoomGame for ``scenario`` with RGB screens and the labels buffer on.

    Raises ImportError without ViZDoom and :class:`UnknownName` for an unknown scenario."""
    game_name(scenario)
    import vizdoom as vzd

    game = vzd.DoomGame()
    game.load_config(os.path.join(vzd.scenarios_path, SCENARIOS[scenario][0]))
    game.set_window_visible(False)
    game.set_screen_format(vzd.ScreenFormat.RGB24)
    game.set_screen_resolution(vzd.ScreenResolution.RES_320X240)
    game.set_labels_buffer_enabled(True)
    if seed is not None:
        game.set_seed(seed)
    # ViZDoom reads ./_vizdoom.ini, runs ./_vizdoom/autoexec.cfg as console commands, and writes both
    # where it starts: a file left in the working folder changed the judge's baselines and the data's
    # bytes. It starts in a private folder, kept while the process lives (it writes the ini at close).
    folder = _private_folder()
    game.set_doom_config_path(os.path.join(folder, "_vizdoom.ini"))
    here = os.getcwd()
    os.chdir(folder)
    try:
        game.init()
    finally:
        os.chdir(here)
    return game


@functools.cache
def _private_folder() -> str:
    folder = tempfile.mkdtemp(prefix="laya-vizdoom-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def buttons(game) -> list[str]:
    return [b.name for b in game.get_available_buttons()]


def target_box(state):
    """The largest label that is not the player, a puff, blood or a dead thing; None when none."""
    boxes = [lb for lb in state.labels if not any(x in lb.object_name for x in IGNORED)]
    return max(boxes, key=lambda lb: lb.width * lb.height, default=None)


def expert_button(state, names, width: int) -> int | None:
    """ATTACK when the target covers the crosshair column, else strafe toward it; None without one."""
    box = target_box(state)
    if box is None:
        return None
    centre = width / 2
    if box.x - CROSSHAIR_MARGIN <= centre <= box.x + box.width + CROSSHAIR_MARGIN:
        return list(names).index("ATTACK")
    return list(names).index("MOVE_LEFT" if box.x + box.width / 2 < centre else "MOVE_RIGHT")
