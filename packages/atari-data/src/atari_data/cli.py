"""`atari-data`: build, check and inspect game-decision datasets.

Bad input never ends in a traceback: it is printed as one line
``error: <file>[:<line>]: <field>: <what is wrong>`` and the exit code is 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path

from atari_data.errors import AtariDataError
from atari_data.layout.writer import DEFAULT_CAPS
from atari_data.meltingpot import lmdb
from atari_data.play.doom import SEED_STRIDE, DoomConfig
from atari_data.produce.executors import WorkerDied
from atari_data.produce.generate import GenerateConfig
from atari_data.produce.importing import SOURCES
from atari_data.publish.hub import COMMIT_FILES
from atari_data.publish.pack import PackConfig
from atari_data.publish.teardown import release_arrow_threads
from laya_protocol import seeds
from laya_protocol.bars import quiet_library_bars
from laya_protocol.config import add_options, add_version, csv, from_args
from laya_protocol.errors import os_error_exit, stopped, terminations_raised
from laya_protocol.names import score_key, scores_key
from laya_protocol.protocol import FRAMESKIP, STICKY_ACTIONS
from laya_protocol.ray import EXECUTORS
from laya_protocol.wording import counted

EXAMPLES = """examples:
  atari-data generate --root data/atari --games Pong,Breakout --source expert2f
  atari-data validate data/atari --images
  atari-data stats data/atari
"""


#: Defects validate (by default) and doctor print before "... and N more defects".
DEFECTS_SHOWN = 50


@dataclass
class ValidateConfig:
    root: str
    sources: list[str] | None = None
    games: list[str] | None = None
    images: bool = False
    max_lines: int = DEFECTS_SHOWN


def _default(cls, name):
    return next(f.default for f in fields(cls) if f.name == name)


def _layout_selection(p: argparse.ArgumentParser) -> None:
    """ROOT and the games of it to use, spelled the same way by every command that reads a layout."""
    p.add_argument("root", help="layout root folder")
    p.add_argument("--sources", "--source", dest="sources", type=csv, help="only these sources (comma-separated)")
    p.add_argument("--games", "--game", dest="games", type=csv, help="only these games (comma-separated)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="atari-data",
        description="Game-decision datasets for vision-language policies: "
        "one frozen record schema, written and checked the same way for every source.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(p, "atari-data")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    from atari_data.limits import DEFAULTS

    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="KIND=N",
        help="raise (or lower) a cap on what one input may cost, checked before it is read: "
        + ", ".join(f"{k} (default {v}{'' if k == 'ratio' else ' MB'})" for k, v in DEFAULTS.items())
        + "; e.g. --limit member=8192 (repeatable; also ATARI_DATA_LIMITS=member=8192)",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser(
        "validate",
        help="check every ready game of a layout and report every defect",
        description="Check every ready game under ROOT (<root>/<source>/<Game>/...) against "
        "the frozen schema and its meta.json. Prints a summary table and exits 0 when "
        "valid; otherwise prints one line per defect (file:line: field: problem) and "
        "exits 2. Games without _READY are listed as not ready, not as errors; a root with no "
        "ready game at all exits 2, as nothing was checked.",
    )
    _layout_selection(v)
    v.add_argument("--json", action="store_true", help="print the verdict, games and every defect as JSON")
    v.add_argument(
        "--images", action="store_true", help="also decode every frame and check its size and mode against frame_format"
    )
    v.add_argument(
        "--max-lines",
        type=int,
        default=_default(ValidateConfig, "max_lines"),
        help="print at most this many defect lines, then a count (default %(default)s)",
    )

    s = sub.add_parser(
        "stats",
        help="a table of records, episodes and labels per (source, game)",
        description="Summarise every game folder under ROOT: records and episodes per "
        "split, frame format, label distribution and its entropy, whether records carry "
        "a soft target, and whether the game is ready.",
    )
    _layout_selection(s)
    s.add_argument("--json", action="store_true", help="print JSON rows instead of a table")

    g = sub.add_parser(
        "generate",
        help="play ALE with an expert and write expert / expert2f data",
        description=textwrap.fill(
            f"Play ALE v5 (sticky actions {STICKY_ACTIONS}, {FRAMESKIP} frames per decision, rewards "
            "summed, auto-FIRE after reset and lost lives) with an epsilon-expert and record every "
            "decision: the raw 210x160 RGB frame, the expert's distribution as `target`, its "
            "argmax as `label`, the move played in `provenance`, and for expert2f the previous "
            "decision's frame. Also measures expert (greedy) and uniform-random baselines into "
            "meta.json. Episode numbers say what an episode is for (the table below); every seed "
            "derives from (--seed, game, episode), so the same command gives the same bytes. A "
            "complete game is skipped unless --force; an interrupted one is redone cleanly.",
            78,
        ),
        epilog=(
            "episode numbers by role (laya_protocol.seeds). An ALE episode of generate, DAgger or the\n"
            "baselines is seeded from its number, --seed and the game; a ViZDoom one with\n"
            f"--seed * {SEED_STRIDE:,} + its number; laya-eval and the play checks use theirs as ALE seeds as\n"
            "they are; imported rows are numbered only:\n" + textwrap.indent(seeds.table(), "  ")
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(g, GenerateConfig, skip=("epsilon",))
    g.add_argument(
        "--epsilon",
        metavar="P[,GAME=P...]",
        help="probability of a uniform random move instead of the expert's, and a game's own after it "
        f"(0.3,Pong=0.5) (default {GenerateConfig.epsilon}; {DoomConfig.epsilon} for ViZDoom)",
    )
    g.add_argument(
        "--platform",
        choices=("ale", "vizdoom"),
        default="ale",
        help="vizdoom: play a ViZDoom scenario with its labels-buffer expert instead (source "
        "doom_<scenario>; --games, --source, --expert and the ALE options do not apply; needs "
        "atari-data[vizdoom]) (default %(default)s)",
    )
    g.add_argument("--scenario", default=DoomConfig.scenario, help="ViZDoom scenario (default %(default)s)")

    pk = sub.add_parser(
        "pack",
        help="turn a layout into a Hub-ready dataset repository folder",
        description="Pack the ready games of ROOT into OUT: Parquet shards per source, game and "
        "split (train, validation) with a config per source, load_dataset(OUT, 'expert2f'), and "
        "one per game, load_dataset(OUT, 'expert2f-Pong'), over the same files; WebDataset tar "
        "shards of the same rows for streaming; every meta.json, the JSON Schemas and a dataset "
        "card whose examples load --repo. Frames are re-compressed losslessly. The layout is "
        "validated first; the same layout always packs to the same bytes.",
    )
    _layout_selection(pk)
    pk.add_argument("--json", action="store_true", help="print the summary as JSON")
    pk.add_argument("out", help="repository folder to create")
    pk.add_argument(
        "--shard-size",
        default=PackConfig.shard_size,
        help=f"target shard size, e.g. 512MB or 1GB (default {PackConfig.shard_size / 1e6:g}MB)",
    )
    pk.add_argument(
        "--formats",
        type=csv,
        default=list(PackConfig.formats),
        help=f"parquet (required: load_dataset reads it) and/or webdataset (default {','.join(PackConfig.formats)})",
    )
    pk.add_argument("--name", default=PackConfig.name, help="title of the dataset card (default %(default)s)")
    pk.add_argument(
        "--png-level",
        default=str(PackConfig.png_level),
        help="libdeflate level 1-12 the 8-bit grey/RGB PNG frames are re-compressed at (same pixels), or keep "
        "to copy them as generated (default %(default)s: Parquet about a third the size, frames as "
        "fast to inflate, 0.3 ms a record more to pack on two cores; tools/bench/load.py)",
    )
    pk.add_argument(
        "--threads",
        type=int,
        help="threads that re-compress frames (default: one a core, at most 8); the output is the same "
        "bytes at any count",
    )
    pk.add_argument(
        "--repo",
        help="the Hub dataset id the card's examples load, e.g. laya/atari (publish writes the id it "
        "publishes to into the uploaded card either way)",
    )
    pk.add_argument("--force", action="store_true", help="replace OUT if it exists")
    pk.add_argument(
        "--replay",
        action="store_true",
        help="no frames: each episode's seed and moves plus an MD5 per frame, so the screens can be "
        "rebuilt locally with `atari-data rebuild` (played sources only)",
    )

    rb = sub.add_parser(
        "rebuild",
        help="rebuild the frames of a replay-packed repository by replaying ALE",
        description="Replay every episode of a replay-packed repository, check every frame against "
        "its MD5, and write each game whose frames all match into ROOT as a ready layout game. Games "
        "with mismatches are reported and not written (exit 2).",
    )
    rb.add_argument("repo", help="replay-packed repository folder")
    rb.add_argument("--root", required=True, help="layout root to write the rebuilt games into")
    rb.add_argument("--force", action="store_true", help="replace a game ROOT already holds (else refused)")

    pb = sub.add_parser(
        "publish",
        help="upload a packed repository to the Hugging Face Hub (resumable)",
        description="Check OUT (its card, `doctor`, no symlinks, nothing a packed repository does not "
        "hold), create the dataset repo if needed, upload the files the Hub does not hold yet in commits of "
        "--commit-files files (the card last, with the deletion of the shards, metas, schemas and replay files "
        "the Hub holds and OUT does not, each named), and tag main's newest commit with the schema version (v1). An "
        "interrupted publish resumes when the same command runs again. The token comes from HF_TOKEN or "
        "`hf auth login` and is never printed.",
    )
    pb.add_argument("out", help="packed repository folder")
    pb.add_argument("--repo", required=True, help="ORG/NAME on the Hub")
    pb.add_argument("--private", action="store_true", help="create the repo private")
    pb.add_argument("--revision", help="branch to upload to (created if missing; no tag is moved)")
    pb.add_argument(
        "--commit-files",
        type=int,
        default=COMMIT_FILES,
        help="files per commit: an interruption loses at most one commit (default %(default)s)",
    )
    pb.add_argument("--dry-run", action="store_true", help="list what would be uploaded and print the card")

    dr = sub.add_parser(
        "doctor",
        help="check a packed or published dataset repository",
        description="Check that the card's YAML matches the files, every config and split loads "
        "with load_dataset, row counts match meta.json and the card, shards are readable tars "
        "without path traversal or stray members, the schema version is known, sizes are within "
        "Hub limits and every frame decodes. A Hub repo id is downloaded first, without its "
        "WebDataset shards unless --tars.",
    )
    dr.add_argument("target", help="a packed repository folder, or ORG/NAME on the Hub")
    dr.add_argument("--json", action="store_true", help="print the verdict, row counts and defects as JSON")
    dr.add_argument("--tars", action="store_true", help="for a Hub id: download and check the WebDataset shards too")

    ga = sub.add_parser(
        "games",
        help="list the ALE v5 games and their minimal action sets",
        description="Print each game's ALE v5 name and its minimal action set in ALE's order. Listing "
        "every game loads every ROM (about 0.2 s each); --games lists only those.",
    )
    ga.add_argument("--games", "--game", dest="games", type=csv, help="only these games (comma-separated)")

    sc = sub.add_parser(
        "schema",
        help="print the frozen schema (JSON Schema or the docs table)",
        description="Print the frozen record schema, or the meta.json one, as JSON Schema or as the "
        "Markdown table docs/formats.md holds.",
    )
    sc.add_argument(
        "--of",
        choices=("record", "meta"),
        default="record",
        help="the record schema or the meta.json one (default %(default)s)",
    )
    sc.add_argument("--markdown", action="store_true", help="print the docs table instead of JSON Schema")
    pl = sub.add_parser(
        "pack-lmdb",
        help="re-shard Melting Pot world-model LMDBs into WebDataset shards + a card",
        description="Read every <SRC>/<game>/data.mdb with an unpickler that builds numpy arrays from "
        "the bytes a row holds, and sets, only (a row needing anything else is refused with its key), "
        "check each row against the guide's schema (finite floats, actions >= 0, orientations 0-3), and "
        "write WebDataset shards (json + one .npy per array, no pickle) with a dataset card to OUT. "
        "Then `atari-data doctor OUT` and `atari-data publish OUT --repo ORG/NAME`.",
    )
    pl.add_argument("src", help="folder of per-game LMDB folders")
    pl.add_argument(
        "out", help="output repository folder, built beside it and swapped in whole (never SRC, inside or around it)"
    )
    pl.add_argument("--force", action="store_true", help="replace OUT when it is a packed repository already")
    pl.add_argument(
        "--rows-per-shard",
        type=int,
        default=lmdb.ROWS_PER_SHARD,
        help="records per WebDataset shard (default %(default)s)",
    )
    pl.add_argument("--name", default=lmdb.CARD_NAME, help="the card's title (default %(default)s)")
    im = sub.add_parser(
        "import",
        help="convert a public dataset into the layout (jat, atari_head, frostbite_masks, playjev)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Convert a public dataset's episodes into records of the frozen schema through "
        "the shared writer (caps, even subsampling, splits, meta.json with dropped frames counted by "
        "reason, _READY last). Frames are kept as the source gives them.",
        epilog="sources:\n"
        "  jat   jat-project/jat-dataset (Apache-2.0): the newest frame of each 84x84 stack as "
        "gray_84x84,\n        actions of the minimal set, JAT train -> train, test -> val\n"
        "  atari_head   Atari-HEAD, Zenodo 3451402 (CC-BY-4.0): human play with gaze, 210x160 RGB "
        "as-is,\n        18-action ids mapped by name, trials chained by load_trial kept together, "
        "~5% to val\n"
        "  frostbite_masks   EpicPinkPenguin/atari_frostbite_with_masks: 128x128 RGB as-is with "
        "the player\n        mask beside each frame, one episode per life, train -> train, "
        "test -> val\n"
        "  playjev   OmniJev/PlayJev-data (browser games, after its frame rebuild): one source per "
        "round\n        (playjev_clone, playjev_dagger1, ...), records whose frame MD5 matches\n"
        "examples:\n"
        "  atari-data import jat --from ~/jat-dataset --root data/atari --games Breakout,Pong\n"
        "  atari-data import jat --from hub:jat-project/jat-dataset --root data/atari --games Pong\n"
        "  atari-data import atari_head --from ~/atari-head --root data/atari --games Breakout\n"
        "  atari-data import jat --from ~/jat-dataset --root data/atari --workers 4   # 4 games at "
        "a time",
    )
    im.add_argument("source", choices=SOURCES, help="which dataset")
    im.add_argument(
        "--from", dest="from_", metavar="SRC", required=True, help="a local copy of the dataset, or hub:REPO (online)"
    )
    im.add_argument("--root", required=True, help="layout root to write into")
    im.add_argument("--games", type=csv, help="ALE v5 names, comma-separated (default: every game found)")
    im.add_argument(
        "--train-frames",
        type=int,
        default=DEFAULT_CAPS["train"],
        help="train records per game at most (default %(default)s)",
    )
    im.add_argument(
        "--val-frames", type=int, default=DEFAULT_CAPS["val"], help="val records per game at most (default %(default)s)"
    )
    im.add_argument("--workers", type=int, default=1, help="games imported in parallel processes (default %(default)s)")
    im.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="ray fans games out over a Ray cluster (RAY_ADDRESS, else a local one; --from must be a "
        "path every node reads); needs atari-data[ray] (default %(default)s)",
    )
    im.add_argument("--force", action="store_true", help="rewrite games that are already complete")
    return p


def _defect(e: AtariDataError) -> dict:
    return {"file": e.file, "line": e.line, "field": e.field, "message": e.message}


def cmd_validate(a) -> int:
    from atari_data.layout.stats import stats_table
    from atari_data.layout.validate import validate

    cfg = ValidateConfig(a.root, a.sources, a.games, a.images, a.max_lines)
    report = validate(cfg.root, cfg.sources, cfg.games, images=cfg.images)
    if a.json:
        print(
            json.dumps(
                {
                    "valid": report.ok and bool(report.games),
                    "games": [f"{g.source}/{g.game}" for g in report.games],
                    "records": report.records,
                    "not_ready": [f"{g.source}/{g.game}" for g in report.not_ready],
                    "defects": [_defect(e) for e in report.defects],
                },
                indent=2,
            )
        )
        return 0 if report.ok and report.games else 2
    for g in report.not_ready:
        print(f"not ready: {g.source}/{g.game} (no _READY; ignored)", file=sys.stderr)
    if not report.ok:
        for e in report.defects[: cfg.max_lines]:
            print(e.render())
        more = len(report.defects) - cfg.max_lines
        if more > 0:
            print(f"... and {counted(more, 'more defect')}")
        print(
            f"{counted(len(report.defects), 'defect')} in {counted(len(report.games), 'ready game')}", file=sys.stderr
        )
        return 2
    if not report.games:
        print(f"no ready games under {cfg.root}", file=sys.stderr)
        return 2
    _print_table(stats_table(cfg.root, cfg.sources, cfg.games).filter(ready=True))
    print(
        f"valid: {counted(len(report.games), 'game')}, {counted(report.records, 'record')}"
        + (", frames decoded" if cfg.images else "")
    )
    return 0


def cmd_stats(a) -> int:
    from atari_data.layout.stats import stats_table

    table = stats_table(a.root, a.sources, a.games)
    if a.json:  # labels as the object meta.json holds (the table keeps them as text, one column type)
        rows = [{**r, "labels": r["labels"] and json.loads(r["labels"])} for r in table.to_dicts()]
        print(json.dumps(rows, indent=2))
    else:
        _print_table(table)
    return 0


def cmd_generate(a) -> int:
    from atari_data.produce.generate import generate, parse_epsilon

    every, games = parse_epsilon(a.epsilon) if a.epsilon is not None else (None, {})
    if a.platform == "vizdoom":
        from atari_data.play.doom import generate_doom

        if games:
            raise AtariDataError("one probability for ViZDoom, whose scenario is one game", field="--epsilon")
        epsilon = DoomConfig.epsilon if every is None else every
        meta = generate_doom(
            DoomConfig(
                root=a.root,
                scenario=a.scenario,
                train_frames=a.train_frames,
                val_frames=a.val_frames,
                epsilon=epsilon,
                seed=a.seed,
                force=a.force,
            )
        )
        source = f"doom_{a.scenario}"
        if meta is None:
            print(f"{source}: already complete (use --force to redo)")
        else:
            print(
                f"{source}/{meta['game']}: {meta['train']['records']} train, {meta['val']['records']} val records; "
                f"frames without a monster: {meta['dropped'].get('no_monster', 0)}"
            )
        return 0
    cfg = from_args(GenerateConfig, a, epsilon=GenerateConfig.epsilon if every is None else every, game_epsilon=games)
    for game, meta in generate(cfg).items():
        if meta is None:
            print(f"{cfg.source}/{game}: already complete (use --force to redo)")
            continue
        line = f"{cfg.source}/{game}: {meta['train']['records']} train, {meta['val']['records']} val records"
        b = meta.get("baselines")
        if b:
            line += (
                f"; expert {b[score_key('expert')]:g} vs random {b[score_key('random')]:g} "
                f"(mean of {counted(len(b[scores_key('expert')]), 'episode')})"
            )
        print(line)
    return 0


def _png_level(text: str) -> int | None:
    if text == "keep":
        return None
    try:
        return int(text)
    except ValueError:
        raise AtariDataError(f"{text!r} is not a libdeflate level 1-12 or keep", field="--png-level") from None


def cmd_pack(a) -> int:
    from atari_data.publish.pack import PackConfig, pack, parse_size

    cfg = PackConfig(
        root=a.root,
        out=a.out,
        sources=a.sources,
        games=a.games,
        shard_size=parse_size(a.shard_size),
        formats=tuple(a.formats),
        force=a.force,
        name=a.name,
        replay=a.replay,
        repo=a.repo,
        png_level=_png_level(a.png_level),
        threads=a.threads,
    )
    summary = pack(cfg)
    if a.json:
        print(json.dumps({"out": str(a.out), **summary}, indent=2))
        return 0
    if a.replay:
        for source, conf in summary["configs"].items():
            records, games = sum(conf["replay"].values()), len(conf["replay"])
            print(f"{source}: {counted(records, 'record')} of {counted(games, 'game')}, replay-packed")
        print(f"packed into {a.out}; rebuild the frames with `atari-data rebuild {a.out} --root DIR`")
        return 0
    for source, conf in summary["configs"].items():
        for split, s in conf["splits"].items():
            print(
                f"{source}/{split}: {counted(s['records'], 'record')} of {counted(len(conf['games']), 'game')}, "
                f"{counted(len(s['parquet']), 'parquet shard')} and {counted(len(s['webdataset']), 'webdataset shard')}"
            )
    print(f"packed into {a.out}; check it with `atari-data doctor {a.out}`")
    return 0


def cmd_publish(a) -> int:
    from atari_data.publish.hub import publish

    files, deleted = publish(
        a.out, a.repo, private=a.private, revision=a.revision, dry_run=a.dry_run, commit_files=a.commit_files
    )
    total = sum(size for _, size in files)
    if a.dry_run:
        for name, size in files:
            print(f"{size:>14,}  {name}")
        print(
            f"would upload {len(files)} files, {total:,} bytes, to dataset {a.repo}"
            f"{' (private)' if a.private else ''}{f' branch {a.revision}' if a.revision else ''}; files the "
            "Hub holds under data/, webdataset/, meta/, schema/ or replay/ and this folder does not would be "
            "deleted (a dry run does not ask the Hub which)"
        )
        print()
        from atari_data.publish.card import card_for

        print(card_for(Path(a.out), a.repo).decode())
    else:
        print(f"uploaded {len(files)} files, {total:,} bytes, to https://huggingface.co/datasets/{a.repo}")
        if deleted:
            shown = ", ".join(deleted[:5]) + (", ..." if len(deleted) > 5 else "")
            print(f"deleted {len(deleted)} files the folder no longer holds (an earlier pack's): {shown}")
    return 0


def cmd_doctor(a) -> int:
    from atari_data.publish.doctor import Doctor
    from atari_data.publish.hub import resolve_repo

    d = Doctor(resolve_repo(a.target, tars=a.tars)).run()
    if a.json:
        print(
            json.dumps(
                {"healthy": not d.defects, "rows": d.counts, "defects": [_defect(e) for e in d.defects]}, indent=2
            )
        )
        return 2 if d.defects else 0
    if d.defects:
        for e in d.defects[:DEFECTS_SHOWN]:
            print(e.render())
        if len(d.defects) > DEFECTS_SHOWN:
            print(f"... and {len(d.defects) - DEFECTS_SHOWN} more defects")
        return 2
    for key, n in sorted(d.counts.items()):
        print(f"{key}: {n} rows")
    print(f"healthy: {a.target}")
    return 0


def cmd_rebuild(a) -> int:
    from atari_data.publish.replay import rebuild

    results = rebuild(a.repo, a.root, a.force)
    bad = 0
    for r in results:
        state = "written" if r.written else "NOT written"
        print(f"{r.source}/{r.game}: {r.matched} of {r.frames} frames match their MD5; {state}")
        for m in r.mismatched[:5]:
            print(f"  mismatch: {m}")
        bad += not r.written
    if bad:
        print(
            f"error: {a.repo}: (frames): {bad} games had frames that do not match their MD5 and were not written: "
            "was the repository changed, or is this another ALE version?",
            file=sys.stderr,
        )
        return 2
    return 0


def cmd_games(a) -> int:
    from atari_data.play.actions import resolve_game
    from laya_protocol.games import all_games, minimal_actions

    for game in [resolve_game(g, "--games") for g in a.games] if a.games else all_games():  # every name checked first
        print(f"{game:<20} {' '.join(minimal_actions(game))}")
    return 0


def cmd_pack_lmdb(a) -> int:
    from atari_data.meltingpot.lmdb import pack_lmdb

    counts = pack_lmdb(a.src, a.out, a.rows_per_shard, a.name, a.force)
    for game, n in counts.items():
        print(f"{game}: {n} clips")
    print(f"wrote {a.out} ({counted(sum(counts.values()), 'clip')}, {counted(len(counts), 'game')})")
    return 0


def cmd_import(a) -> int:
    from atari_data.produce.generate import check_counts
    from atari_data.produce.importing import importer, plan, run_jobs
    from atari_data.produce.sources import local_copy
    from atari_data.publish.repo import check_out_root

    check_counts(("--train-frames", a.train_frames, 0), ("--val-frames", a.val_frames, 0), ("--workers", a.workers, 1))
    check_out_root(a.root)  # before a download, and before the copy is read
    source = importer(a.source)
    if source.REPO is None and a.from_.startswith("hub:"):
        raise AtariDataError(
            f"{a.source} is not on the Hub ({source.ORIGIN}): download it and pass its folder", field="--from"
        )
    root = local_copy(a.from_, source.REPO or "", source.download_patterns(a.games))
    jobs = plan(a.source, root, a.root, a.games, {"train": a.train_frames, "val": a.val_frames}, a.force)
    for job, meta in zip(jobs, run_jobs(jobs, a.executor, a.workers), strict=True):
        _print_import(job.name, meta)
    return 0


def _print_import(name: str, meta: dict | None) -> None:
    if meta is None:
        print(f"{name}: already complete (use --force to redo)")
    else:
        dropped = ", ".join(f"{k} {v}" for k, v in meta["dropped"].items()) or "none"
        print(f"{name}: {meta['train']['records']} train, {meta['val']['records']} val records; dropped: {dropped}")


def cmd_schema(a) -> int:
    from atari_data import schema

    if a.markdown:
        print(schema.markdown_table(schema.RECORD if a.of == "record" else schema.META))
    else:
        print(json.dumps(schema.json_schema(a.of), indent=2))
    return 0


def _print_table(df) -> None:
    from atari_data.layout.stats import pl  # polars is imported there, and only there (atari_data.signals)

    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=200,
        fmt_str_lengths=60,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        print(df)


#: What the same command does when run again after a stop, where it is not redoing unfinished games.
AGAIN = {"publish": "upload what is not there yet", "pack": "pack again", "pack-lmdb": "pack again"}

COMMANDS = {
    "validate": cmd_validate,
    "stats": cmd_stats,
    "generate": cmd_generate,
    "pack": cmd_pack,
    "rebuild": cmd_rebuild,
    "publish": cmd_publish,
    "doctor": cmd_doctor,
    "games": cmd_games,
    "schema": cmd_schema,
    "import": cmd_import,
    "pack-lmdb": cmd_pack_lmdb,
}


@terminations_raised()
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_library_bars()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    for library in ("huggingface_hub", "datasets"):  # each prints through a handler of its own: once, not twice
        logging.getLogger(library).propagate = False
    try:
        from atari_data.limits import ENV, parse

        from_env = parse(os.environ.get(ENV, ""), ENV)  # a bad variable is refused now, not at the first frame
        if args.limit:  # through the environment, so worker processes apply the same limits
            merged = {**from_env, **parse(",".join(args.limit))}
            os.environ[ENV] = ",".join(f"{k}={v}" for k, v in merged.items())
        return COMMANDS[args.command](args)
    except AtariDataError as e:
        print(f"error: {e.render()}", file=sys.stderr)
        return 2
    except WorkerDied as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        how, code = stopped(e)
        print(f"{how}; rerun the same command to {AGAIN.get(args.command, 'redo unfinished games')}", file=sys.stderr)
        return code
    except OSError as e:
        return os_error_exit(e)
    finally:
        release_arrow_threads()


if __name__ == "__main__":
    sys.exit(main())
