"""Both CLIs turn the Hub client's, datasets' and transformers' progress bars off where stderr is not
a terminal (``laya_protocol.bars``), through the environment, and directly for a library a
caller imported first; a user's own setting stands. The CLIs' subprocess tests (publish, push, train
on a Hub dataset) check their standard error holds no bar."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from laya_protocol.bars import quiet_library_bars

SETTINGS = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def bars_drawn(stderr: str) -> list[str]:
    """The lines of ``stderr`` a tqdm bar drew (a rate, ``12.3it/s]``, or a carriage return)."""
    return [line for line in stderr.split("\n") if "\r" in line or "/s]" in line]


@pytest.fixture
def libraries(monkeypatch):
    """The three libraries imported, their bars on, as a notebook that imported them has them."""
    import importlib

    import datasets
    from huggingface_hub import utils as hub
    from transformers.utils import logging

    for name in SETTINGS:
        monkeypatch.setenv(name, "")  # so that the undo puts back what was there, or nothing
        monkeypatch.delenv(name)
    # Each library read its variable once, at import: in this worker an earlier in-process CLI command
    # may have set it first (and their own switches then refuse to turn bars on). Unset, as then.
    monkeypatch.setattr(importlib.import_module("huggingface_hub.utils.tqdm"), "HF_HUB_DISABLE_PROGRESS_BARS", None)
    monkeypatch.setattr(importlib.import_module("datasets.utils.tqdm"), "HF_DATASETS_DISABLE_PROGRESS_BARS", None)
    hub.enable_progress_bars()
    logging.enable_progress_bar()
    datasets.enable_progress_bars()
    yield hub, logging, datasets
    hub.enable_progress_bars()
    logging.enable_progress_bar()
    datasets.enable_progress_bars()


def test_a_library_imported_first_is_told_directly(libraries, monkeypatch):
    hub, logging, datasets = libraries
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    quiet_library_bars()
    assert hub.are_progress_bars_disabled()
    assert not logging.is_progress_bar_enabled()
    assert datasets.is_progress_bar_enabled() is False
    assert [os.environ[name] for name in SETTINGS] == ["1", "1"]  # for the processes it starts


def test_a_users_own_setting_stands(libraries, monkeypatch):
    hub, logging, datasets = libraries
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    for name in SETTINGS:
        monkeypatch.setenv(name, "0")
    quiet_library_bars()
    assert logging.is_progress_bar_enabled() and datasets.is_progress_bar_enabled()


def test_a_fresh_process_reads_it_from_the_environment_without_importing_them():
    code = (
        "import sys\nfrom laya_protocol.bars import quiet_library_bars\nquiet_library_bars()\n"
        "assert not {'datasets', 'transformers', 'huggingface_hub'} & set(sys.modules), sys.modules.keys()\n"
        "import datasets\nfrom transformers.utils import logging\n"
        "print(datasets.is_progress_bar_enabled(), logging.is_progress_bar_enabled())"
    )
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}  # as a user's shell has them
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False"], done.stdout
