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
from atari_data.executors import fan_out

SOURCES = ("jat", "atari_head", "frostbite_masks", "playjev")


@dataclass
class ImportJob:
    """One game of one source. For PlayJev, ``game`` is the folder slug and ``round`` the round."""

    source: str
    root: str
    out: str
    game: str
    caps: dict
    force: bool = False
    round: str | None = None

    @property
    def name(self) -> str:
        """``<output source>/<Game>`` as the layout names it."""
        if self.source == "playjev":
            return f"playjev_{self.round}/{importer('playjev').game_name(self.game)}"
        return f"{importer(self.source).SOURCE}/{self.game}"


def importer(source: str):
    """The module of one importer: ``atari_data.sources.<source>``."""
    if source not in SOURCES:
        raise AtariDataError(f"unknown source {source!r} (expected one of {', '.join(SOURCES)})", field="source")
    return importlib.import_module(f"atari_data.sources.{source}")


def plan(source: str, root: str | Path, out: str | Path, games: Sequence[str] | None, caps: dict,
         force: bool = False) -> list[ImportJob]:
    """The jobs for ``games`` (ALE names, or PlayJev folder names; None: every game in ``root``, a
    local copy)."""
    from atari_data.actions import resolve_game

    root = Path(root)
    common = dict(root=str(root), out=str(out), caps=dict(caps), force=force)
    if source == "playjev":  # browser games: folder names, one source per round
        wanted = {g.lower().replace("_", "") for g in games} if games else None
        playjev = importer("playjev")
        return [ImportJob(source, game=slug, round=round_, **common) for slug in playjev.available_games(root)
                if wanted is None or slug.lower().replace("_", "") in wanted
                for round_ in playjev.rounds_of(root, slug)]
    names = [resolve_game(g) for g in games] if games else importer(source).available_games(root)
    if not names:
        raise AtariDataError(f"no games found (a local copy of {source})", file=str(root), field="--from")
    return [ImportJob(source, game=g, **common) for g in names]


def run_job(job: ImportJob, progress=None) -> dict | None:
    """Import one game; its meta.json, or None when it was already complete."""
    module = importer(job.source)
    if job.source == "playjev":
        return module.import_round(job.root, job.out, job.game, job.round, caps=job.caps, force=job.force,
                                   progress=progress)
    return module.import_game(job.root, job.out, job.game, caps=job.caps, force=job.force, progress=progress)


def run_jobs(jobs: Sequence[ImportJob], executor: str = "local", workers: int = 1,
             progress: bool = True) -> list[dict | None]:
    """Every job's result, in order: here (a progress bar of episodes per game), on ``workers``
    processes, or as Ray tasks (``executors.fan_out``)."""
    from tqdm import tqdm

    def here(job: ImportJob) -> dict | None:
        with tqdm(desc=job.name, unit=" episodes", leave=False, disable=None if progress else True) as bar:
            return run_job(job, bar)

    return fan_out(run_job, jobs, executor=executor, workers=workers, here=here, progress=progress, unit=" games")
