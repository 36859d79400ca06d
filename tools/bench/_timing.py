"""How the benches time two or more sides on a machine whose speed drifts: in rounds.

This machine's rates move between runs minutes apart (a reader's 1.9x, the disk's file creation
3-15x). Timing one side's repeats and then the next side's compares them at different times, and
the side timed first also pays first-use costs (imports, kernels, caches). So every side is called
once untimed first, then each round times every side once, every other round in the opposite
order, and a side's figure is its best round.

The benches import it as ``_timing`` (a script's folder is on ``sys.path`` when it runs; the tests
load the scripts by path and put the folder there too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def in_rounds(
    sides: dict[str, Callable[[], Any]],
    rounds: int,
    warm: bool = True,
    before: Callable[[], Any] | None = None,
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """(seconds of each side in each round, each side's last result). Rounds call the sides in the
    order of ``sides``, then in the reverse order, and so on; with ``warm``, each is called once
    untimed first. ``before`` runs, untimed, before every timed call (a disk flush, so no side pays
    for the writes of the one before it)."""
    if rounds < 1:
        raise ValueError(f"rounds: {rounds}; at least one is timed")
    results = {what: run() for what, run in sides.items()} if warm else {}
    seconds: dict[str, list[float]] = {what: [] for what in sides}
    for r in range(rounds):
        for what, run in list(sides.items())[:: 1 if r % 2 == 0 else -1]:
            if before is not None:
                before()
            t = time.perf_counter()
            results[what] = run()
            seconds[what].append(time.perf_counter() - t)
    return seconds, results
