"""The Hub client's, `datasets`' and `transformers`' progress bars, off where stderr is not a terminal.

Every command calls it first; laya-eval's too, for the policies it plays (one that loads a checkpoint
by Hub id downloads it). It imports none of the three libraries, so the judge stays independent.

They draw even into logs: a captured `train` or `pack` would write a bar a file or a shard. Our own
bars follow the terminal, and so should theirs. Set through the environment, which each library
reads on import, so a command imports none of them for it (`transformers` and `datasets` take about
a second), worker processes inherit it, and a user's own setting stands. A library a caller already
imported (a notebook calling a CLI's `main`) read it too early, so it is told directly.
"""

from __future__ import annotations

import os
import sys

_SETTINGS = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def quiet_library_bars() -> None:
    if sys.stderr.isatty():
        return
    for name in _SETTINGS:
        os.environ.setdefault(name, "1")
    if os.environ[_SETTINGS[0]] == "1" and "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
        if "transformers" in sys.modules:  # it keeps its own switch, read from the Hub's at its import
            from transformers.utils import logging

            logging.disable_progress_bar()
    if os.environ[_SETTINGS[1]] == "1" and "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
