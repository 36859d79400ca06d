"""Run an importer over games: one after another here, on a process pool, or on Ray.

A job is one output folder (``<source>/<Game>``), written whole by the shared writer, so every
executor gives the same bytes; the summaries come back in the order of the jobs. The source copy
must be readable from wherever a job runs (a shared path on a cluster).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from atari_data.errors import AtariDataError
from atari_data.produce.executors import fan_out

SOURCES = ("jat", "atari_head", "frostbite_masks", "playjev")


class Importer(Protocol):
    """What every module in :mod:`atari_data.produce.sources` offers. A unit is one output folder:
    (game, part), ``part`` being what else names it (PlayJev's round; None for the others)."""

    REPO: str | None  # the Hub dataset it downloads from with --from hub:, None when it is not on the Hub
    ORIGIN: str  # where the data comes from, in words

    def units(self, root: Path, games: Sequence[str] | None) -> list[tuple[str, str | None]]: ...
    def output(self, game: str, part: str | None) -> str: ...  # ``<source>/<Game>`` in the layout
    def run(
        self, root: str | Path, out: str | Path, game: str, part: str | None, caps: dict, force: bool, progress
    ) -> dict | None: ...
    def download_patterns(self, games: Sequence[str] | None) -> list[str] | None: ...


@dataclass
class ImportJob:
    """One output folder of one source."""

    source: str
    root: str
    out: str
    game: str
    caps: dict
    force: bool = False
    part: str | None = None

    @property
    def name(self) -> str:
        """``<output source>/<Game>`` as the layout names it."""
        return importer(self.source).output(self.game, self.part)


def importer(source: str) -> Importer:
    """The module of one importer: ``atari_data.produce.sources.<source>``."""
    if source not in SOURCES:
        raise AtariDataError(f"unknown source {source!r} (expected one of {', '.join(SOURCES)})", field="source")
    return importlib.import_module(f"atari_data.produce.sources.{source}")  # type: ignore[return-value]


def plan(
    source: str, root: str | Path, out: str | Path, games: Sequence[str] | None, caps: dict, force: bool = False
) -> list[ImportJob]:
    """The jobs for ``games`` (None: every game in ``root``, a local copy)."""
    units = importer(source).units(Path(root), games)
    if not units:
        raise AtariDataError(f"no games found (a local copy of {source})", file=str(root), field="--from")
    return [
        ImportJob(source, root=str(root), out=str(out), game=game, part=part, caps=dict(caps), force=force)
        for game, part in units
    ]


def run_job(job: ImportJob, progress=None) -> dict | None:
    """Import one unit; its meta.json, or None when it was already complete."""
    return importer(job.source).run(job.root, job.out, job.game, job.part, job.caps, job.force, progress)


def run_jobs(
    jobs: Sequence[ImportJob], executor: str = "local", workers: int = 1, progress: bool = True
) -> list[dict | None]:
    """Every job's result, in order: here (a progress bar of episodes per game), on ``workers``
    processes, or as Ray tasks (``executors.fan_out``)."""
    from tqdm import tqdm

    def here(job: ImportJob) -> dict | None:
        with tqdm(desc=job.name, unit=" episodes", leave=False, disable=None if progress else True) as bar:
            return run_job(job, bar)

    return fan_out(run_job, jobs, executor=executor, workers=workers, here=here, progress=progress, unit=" games")
