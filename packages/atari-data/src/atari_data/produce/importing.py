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

from atari_data.errors import AtariDataError
from atari_data.produce.executors import fan_out
from atari_data.publish.repo import check_out_root

SOURCES = ("jat", "atari_head", "frostbite_masks", "playjev")


class Importer:
    """One source as the import runner sees it. A module of :mod:`atari_data.produce.sources` names
    its ``REPO`` (the Hub dataset ``--from hub:`` downloads, or None) and ``ORIGIN``, and writes one
    game with ``import_game(root, out, game, caps, force, progress)``. A unit is one output folder,
    (game, part); a source whose units are not one per ALE game (PlayJev: a browser game and a
    round) defines ``units``, ``output`` and ``run`` itself, and one that downloads selectively
    defines ``download_patterns``."""

    def __init__(self, module):
        self.module = module
        self.REPO: str | None = module.REPO
        self.ORIGIN: str = module.ORIGIN

    def units(self, root: Path, games: Sequence[str] | None) -> list[tuple[str, str | None]]:
        if hasattr(self.module, "units"):
            return self.module.units(root, games)
        from atari_data.play.actions import resolve_game

        names = [resolve_game(g, "--games") for g in games] if games else self.module.available_games(root)
        return [(g, None) for g in names]

    def output(self, game: str, part: str | None) -> str:
        """``<source>/<Game>`` as the layout names it."""
        if hasattr(self.module, "output"):
            return self.module.output(game, part)
        return f"{self.module.SOURCE}/{game}"

    def run(self, root, out, game: str, part: str | None, caps: dict, force: bool, progress) -> dict | None:
        if hasattr(self.module, "run"):
            return self.module.run(root, out, game, part, caps, force, progress)
        return self.module.import_game(root, out, game, caps=caps, force=force, progress=progress)

    def download_patterns(self, games: Sequence[str] | None) -> list[str] | None:
        if hasattr(self.module, "download_patterns"):
            return self.module.download_patterns(games)
        return None


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
    return Importer(importlib.import_module(f"atari_data.produce.sources.{source}"))


def plan(
    source: str, root: str | Path, out: str | Path, games: Sequence[str] | None, caps: dict, force: bool = False
) -> list[ImportJob]:
    """The jobs for ``games`` (None: every game in ``root``, a local copy), writing into the layout ``out``."""
    check_out_root(str(out))
    units = list(dict.fromkeys(importer(source).units(Path(root), games)))  # Pong,Pong: one writer, not two
    if not units:
        raise AtariDataError(f"no games found (a local copy of {source})", file=str(root), field="--from")
    jobs = [
        ImportJob(source, root=str(root), out=str(out), game=game, part=part, caps=dict(caps), force=force)
        for game, part in units
    ]
    named: dict[str, ImportJob] = {}
    for job in jobs:  # two units writing one folder: the second would replace the first, or be refused after it
        if (first := named.setdefault(job.name, job)) is not job:
            raise AtariDataError(
                f"{first.game!r} and {job.game!r} would both be written as {job.name}: rename one in the copy",
                file=str(root),
                field="--from",
            )
    return jobs


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
