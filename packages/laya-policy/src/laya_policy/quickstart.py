"""The whole pipeline in one command, on built-in defaults: CPU only, no downloads.

    uv run laya-policy quickstart                   # CPU only; README.md says how long
    uv run laya-policy quickstart --games Pong,Breakout --steps 20000 --train-frames 20000 --device cuda

Stages, each skipped when a rerun finds it done (``OUT/stages/<stage>.json``); training and
evaluation also resume from where an interrupted run stopped:

1. generate  expert2f data with the built-in RAM experts (atari-data generate)
2. validate  every record and meta.json (atari-data validate)
3. pack      Parquet + WebDataset shards and a dataset card (atari-data pack)
4. load      the packed folder back through ``datasets.load_dataset``
5. train     the policy from the packed folder (laya-policy train)
6. evaluate  in laya-eval against random (same run) and the expert baselines of the data
7. report    OUT/report.md: dataset stats, training curve, evaluation table and plots, a video
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from atari_data.layout import write_atomic
from atari_data.play.experts.builtin import BUILTIN
from laya_policy.checkpoint import FILE_MAX, FINAL, read_json_file
from laya_policy.settings import QuickstartConfig, TrainConfig
from laya_protocol.files import Refused, parse_json, read_capped
from laya_protocol.locks import FileLock
from laya_protocol.names import HUB_SPLITS

STAGES = ("generate", "validate", "pack", "load", "train", "evaluate", "report")
#: The data's source: the built-in experts' two-frame records.
SOURCE = "expert2f"
#: A run folder's parts, each written by one stage (none may be a link).
SETTINGS, RECORDS, DATA, PACKED, TRAIN, EVAL = "settings.json", "stages", "data", "packed", "train", "eval"
RESULTS, REPORT, CURVE = "results.json", "report.md", "training.png"
PARTS = (SETTINGS, RECORDS, DATA, PACKED, TRAIN, EVAL, REPORT, CURVE)
#: What a stage leaves in the run folder; a stage recorded done whose output is gone runs again.
OUTPUTS = {
    "generate": DATA,
    "pack": PACKED,
    "train": f"{TRAIN}/{FINAL}",
    "evaluate": f"{EVAL}/{RESULTS}",
    "report": REPORT,
}
#: The report's video: a GIF, which a Markdown viewer shows inline.
VIDEO = ".gif"


class Quickstart:
    def __init__(self, cfg: QuickstartConfig):
        self.cfg, self.out = cfg, Path(cfg.out)
        self.data, self.packed = self.out / DATA, self.out / PACKED
        self.run_dir, self.eval_dir = self.out / TRAIN, self.out / EVAL

    def done(self, stage: str) -> dict | None:
        """A finished stage's record (as :meth:`mark` wrote it), or None; anything else there is refused."""
        path = self.out / RECORDS / f"{stage}.json"
        if not path.exists() and not path.is_symlink():
            return None
        record = read_json_file(path)
        if not isinstance(record, dict) or not isinstance(record.get("seconds"), (int, float)):
            raise ValueError(f"{path}: is not a stage record this quickstart wrote; pass --restart to start over")
        return record

    def mark(self, stage: str, result: dict) -> dict:
        path = self.out / RECORDS / f"{stage}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(result, indent=2) + "\n").encode())
        return result

    def check(self) -> None:
        """Every setting checked by the stage that takes it, before any work (a bad --episodes was
        found after the data and the training): one line naming the flag."""
        from atari_data.produce.generate import check_counts
        from laya_policy.train import resolve

        c = self.cfg
        if self.out.exists() and not self.out.is_dir():
            raise ValueError(f"--out {self.out}: is a file, expected a run folder")
        # the quickstart's own needs: a validation split (its load stage reads it, training evaluates on
        # it) and a fixed step count (train's --steps may be left out for --passes)
        check_counts(
            ("--val-frames", c.val_frames, 1), ("--steps", c.steps, 1), ("--video-decisions", c.video_decisions, 1)
        )
        from laya_policy.video import decisions_problem

        if problem := decisions_problem(VIDEO, c.video_decisions):  # said now, not after training
            raise ValueError(f"--video-decisions {problem}")
        if others := [g for g in c.games if g.lower() not in {b.lower() for b in BUILTIN}]:
            raise ValueError(
                f"--games: {', '.join(others)}: the quickstart plays the built-in experts' games only "
                f"({', '.join(sorted(BUILTIN))}); for another game, make its data with atari-data generate "
                "--expert planner (any ALE game) and train on it with laya-policy train"
            )
        self.generate_config()
        try:
            resolve(self.train_config())
        except ValueError as e:  # the one flag named otherwise here
            raise ValueError(str(e).replace("--max-minutes", "--minutes")) from None
        self.run_config()

    def run(self) -> dict:
        self.check()
        if self.out.is_symlink():  # its lock, named after the link, would not be the folder's
            raise ValueError(f"--out {self.out}: is a symbolic link; pass the folder it points to")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        with FileLock.beside(self.out, f"the run folder {self.out}", _lock_error):
            return self._run()

    def _run(self) -> dict:
        settings, wanted = self.out / SETTINGS, self.settings()
        if self.cfg.restart and self.out.exists():  # run() refused a link
            self._delete()
        # a new folder, an empty one or its own: it moved in among a training run's files, which the
        # next --restart then deleted with it
        others = sorted(p.name for p in self.out.iterdir() if p.name not in PARTS) if self.out.is_dir() else []
        if others and not self._ours():
            raise ValueError(
                f"--out {self.out}: holds files a quickstart does not write ({', '.join(others[:4])}) and no "
                "quickstart's settings.json; a quickstart runs in a new or empty folder, or its own (pick a new --out)"
            )
        self.out.mkdir(parents=True, exist_ok=True)
        for part in PARTS:  # a link planted there had the stages write where it pointed
            if (self.out / part).is_symlink():
                raise ValueError(f"{self.out / part}: is a symbolic link, not part of a run folder; remove it")
        if settings.exists() or settings.is_symlink():
            made = _compared(read_json_file(settings))
            if made != wanted:
                raise ValueError(
                    f"{self.out} was made with other settings ({settings}: {_differences(made, wanted)}); "
                    "pass --restart to start over or --out for a new folder"
                )
        write_atomic(settings, (json.dumps(wanted, indent=2) + "\n").encode())
        results = {}
        redo = False  # once a stage runs again, every later one does: it reads what that one wrote
        for i, stage in enumerate(STAGES, 1):
            previous = None if redo else self.done(stage)
            if previous is not None and not (self.out / OUTPUTS.get(stage, "")).exists():
                print(f"[{i}/{len(STAGES)}] {stage}: done before, but {OUTPUTS[stage]} is gone; again")
                previous = None
            redo = previous is None
            if previous is not None:
                print(f"[{i}/{len(STAGES)}] {stage}: done before, skipped")
                results[stage] = previous
                continue
            print(f"[{i}/{len(STAGES)}] {stage} ...", flush=True)
            t = time.monotonic()
            result = getattr(self, stage)()
            result["seconds"] = round(time.monotonic() - t, 1)
            results[stage] = self.mark(stage, result)
            print(f"[{i}/{len(STAGES)}] {stage}: done in {result['seconds']:.0f} s", flush=True)
        return results

    def settings(self) -> dict:
        """What a rerun must match (see :func:`_compared`)."""
        return _compared(asdict(self.cfg))

    def _ours(self) -> bool:
        """Whether OUT holds a quickstart's settings.json (a plain file, as one writes it)."""
        made = self.out / SETTINGS
        return made.is_file() and not made.is_symlink() and _is_settings(read_json_file(made))

    def _delete(self) -> None:
        """--restart: the run folder moved aside in one step, then deleted, so a stop part-way leaves
        the old run whole or none of it in its place (what a stopped deletion left aside goes with the
        next --restart). Only an empty folder or a quickstart's (its
        settings.json) is deleted, and never the current folder or one above it."""
        import os
        import shutil

        if not self.out.is_dir():
            raise ValueError(f"--out {self.out}: is not a folder; --restart deletes only a run folder")
        if Path.cwd().resolve().is_relative_to(self.out.resolve()):
            raise ValueError(f"--out {self.out}: holds the current folder; --restart would delete it")
        if not self._ours() and any(self.out.iterdir()):
            raise ValueError(
                f"--out {self.out}: holds files and no quickstart's settings.json; --restart deletes only a "
                "quickstart's run folder (pick a new --out)"
            )
        for stale in self.out.parent.glob(f".{self.out.name}.deleting-*"):  # a deletion stopped part-way
            shutil.rmtree(stale, ignore_errors=True)
        aside = self.out.parent / f".{self.out.name}.deleting-{os.getpid()}"
        self.out.rename(aside)
        shutil.rmtree(aside)

    # -- stages ----------------------------------------------------------------------------------
    def generate(self) -> dict:
        from atari_data.produce.generate import generate

        return {"games": sorted(generate(self.generate_config()))}

    def generate_config(self):
        from atari_data.produce.generate import GenerateConfig, parse_epsilon

        c = self.cfg
        every, games = parse_epsilon(c.epsilon)  # __post_init__ wrote every game's
        return GenerateConfig(
            root=str(self.data),
            source=SOURCE,
            games=c.games,
            train_frames=c.train_frames,
            val_frames=c.val_frames,
            min_train_episodes=8,
            decision_cap=c.decision_cap,
            baseline_episodes=c.baseline_episodes,
            epsilon=every,
            game_epsilon=games,
            seed=c.seed,
            workers=c.workers,
        )

    def validate(self) -> dict:
        from atari_data.errors import AtariDataError
        from atari_data.layout.validate import validate

        report = validate(self.data)
        if not report.ok:
            raise AtariDataError(
                f"{len(report.defects)} defects, e.g. {report.defects[0].render()}", file=str(self.data)
            )
        return {"records": report.records, "games": len(report.games)}

    def pack(self) -> dict:
        from atari_data.publish.pack import PackConfig, pack

        summary = pack(PackConfig(root=str(self.data), out=str(self.packed), force=True))
        return {"summary": summary}

    def load(self) -> dict:
        from datasets import load_dataset

        counts = {}
        for split in HUB_SPLITS.values():
            ds = load_dataset(str(self.packed), SOURCE, split=split)
            counts[split] = len(ds)
        first = ds[0]
        return {"rows": counts, "columns": sorted(first), "example": {k: first[k] for k in ("id", "game", "label")}}

    def train(self) -> dict:
        from laya_policy.train import train

        return train(self.train_config())

    def train_config(self):
        c = self.cfg
        return TrainConfig(
            data=str(self.packed),
            out=str(self.run_dir),
            model=c.model,
            image_size=c.image_size,
            batch=c.batch,
            processes=(1 if c.device.startswith("cuda") else 2) if c.processes is None else c.processes,
            steps=c.steps,
            max_minutes=c.minutes,
            device=c.device,
            seed=c.seed,
            evals=4,
        )

    def evaluate(self) -> dict:
        from laya_eval.evaluate import evaluate

        return {"summary": evaluate(self.run_config())["summary"]}

    def run_config(self):
        from laya_eval.evaluate import RunConfig

        c = self.cfg
        return RunConfig(
            policy=f"laya:{self.run_dir / FINAL}",
            games=c.games,
            episodes=c.episodes,
            cap=c.cap,
            greedy=not c.sample,
            random_episodes=c.episodes,
            # the data's baselines beside the reference table: laya-eval's choose_baseline picks by cap
            baselines=str(self.data) if c.baseline_episodes else None,
            policy_kwargs={"device": c.device},
            out=str(self.eval_dir / RESULTS),
        )

    def report(self) -> dict:
        from laya_eval.evaluate import load_results
        from laya_eval.report import markdown, write_report
        from laya_policy.play import LayaPolicy
        from laya_policy.video import record_episode

        results = load_results(self.eval_dir / RESULTS)
        figures = [p.name for p in write_report(results, self.eval_dir) if p.suffix == ".png"]
        summary, log = training_record(self.run_dir)
        write_atomic(self.out / CURVE, plot_training(summary["curve"], log))
        best = max(
            (g for g in results["games"].values() if g.get("mean") is not None),
            key=lambda g: g.get("normalised") or -1e9,
            default=None,
        )
        video = {}
        if best is not None:
            video = record_episode(
                LayaPolicy(str(self.run_dir / FINAL), device=self.cfg.device),
                best["game"],
                self.out / f"{best['game']}{VIDEO}",
                max_decisions=self.cfg.video_decisions,
                greedy=not self.cfg.sample,  # as it was judged
            )
        from atari_data.layout.stats import stats_table
        from atari_data.produce.generate import epsilon_text

        gen = self.generate_config()  # the probabilities as generate resolved them

        stats = stats_table(self.data)
        lines = [
            "# Quickstart report",
            "",
            "Built-in RAM experts played ALE v5 to make `expert2f` data, each move a uniform random one with "
            f"probability {epsilon_text(gen.epsilon, gen.game_epsilon)} (labels are the expert's own choice "
            "either way); it was validated, "
            "packed, read back through `datasets.load_dataset`, used to train the policy, and the policy was "
            "judged by laya-eval "
            "against a uniform-random policy (same run). Normalised scores use, per game, the baseline named "
            "below: the data's own expert and random scores (meta.json) where they were measured at the "
            f"evaluation's cap of {self.cfg.cap} decisions, else laya-eval's reference table at that cap, "
            "else the data's own at another cap (flagged in the evaluation).",
            "",
            "| game | expert | random | cap | baseline from |",
            "| --- | ---: | ---: | ---: | --- |",
            *_baseline_rows(results),
            "",
            "## Data",
            "",
            _markdown_table(stats.drop("labels")),
            "",
            f"Read back through `load_dataset`: {(self.done('load') or {}).get('rows')} rows.",
            "",
            "## Training",
            "",
            f"{summary['steps']} steps of {summary['replicas']['world']} x {self.cfg.batch} records in "
            f"{summary['minutes']:.1f} min ({summary['samples_per_s']} samples/s, "
            f"data wait {summary['data_wait_share']:.1%} of step time); best checkpoint {summary.get('best')}.",
            "",
            "![training](training.png)",
            "",
            "Validation accuracy beside the majority label's share (what always giving the most common answer "
            "scores): a game whose accuracy stays at that line is not read from the screen.",
            "",
            "| evaluation step | group | accuracy | majority label | NLL | ECE |",
            "| ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        for e in log:
            for key, g in e["games"].items():
                majority = f"{g['majority']:.3f}" if "majority" in g else ""  # logs written before it was kept
                lines.append(
                    f"| {e['step']} | {key} | {g['accuracy']:.3f} | {majority} | {g['nll']:.3f} | {g['ece']:.3f} |"
                )
        body = markdown(results).replace("# Evaluation of", "## Evaluation of")
        # laya-eval draws figures only when a game was scored against baselines
        shown = " ".join(f"![{n[:-4]}](eval/{n})" for n in ("normalised.png", "profile.png") if n in figures)
        lines += ["", body, *([shown] if shown else []), ""]
        if video:
            lines += [
                "## The trained policy playing",
                "",
                f"![{video['game']}]({Path(video['video']).name}) {video['decisions']} decisions, "
                f"score {video['score']:g}.",
                "",
            ]
        write_atomic(self.out / REPORT, "\n".join(lines).encode())
        return {"report": str(self.out / REPORT), "video": video.get("video")}


#: What the report reads of a training run, and the kinds of their values.
SUMMARY = {"steps": int, "minutes": (int, float), "samples_per_s": (int, float), "data_wait_share": (int, float)}
EVALUATION = {"accuracy": (int, float), "nll": (int, float), "ece": (int, float)}


def training_record(run: Path) -> tuple[dict, list[dict]]:
    """``summary.json`` and ``log.jsonl`` of a training run, as the report reads them; a file edited
    or cut short is one ValueError naming it, the line and the field (they were KeyError tracebacks)."""
    from laya_policy.train import LOG_FILE, SUMMARY_FILE

    path = run / SUMMARY_FILE
    summary = read_json_file(path)
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: is not a training summary (a JSON object)")
    _fields(summary, SUMMARY, str(path))
    replicas = summary.get("replicas")
    world = replicas.get("world") if isinstance(replicas, dict) else None
    if not isinstance(world, int) or isinstance(world, bool):
        raise ValueError(f"{path}: replicas.world: expected a whole number")
    curve = summary.get("curve")
    if not isinstance(curve, list) or not all(_pair(c) for c in curve):
        raise ValueError(f"{path}: curve: expected [step, loss] pairs of numbers")
    path = run / LOG_FILE
    log = []
    for n, line in enumerate(_text(path).splitlines(), 1):
        where = f"{path}:{n}"
        try:
            entry = parse_json(line.encode())
        except Refused as e:
            raise ValueError(f"{where}: {e}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("games"), dict):
            raise ValueError(f"{where}: games: expected an evaluation's groups")
        _fields(entry, {"step": int, "nll": (int, float)}, where)
        for key, group in entry["games"].items():
            if not isinstance(group, dict):
                raise ValueError(f"{where}: games.{key}: expected an object")
            _fields(
                group,
                {**EVALUATION, **({"majority": (int, float)} if "majority" in group else {})},
                f"{where}: games.{key}",
            )
        log.append(entry)
    return summary, log


def _text(path: Path) -> str:
    try:
        return read_capped(path, FILE_MAX).decode("utf-8")
    except Refused as e:
        raise ValueError(f"{path}: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 at byte {e.start}") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None


def _fields(record: dict, kinds: dict, where: str) -> None:
    for field, kind in kinds.items():
        value = record.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            expected = "a whole number" if kind is int else "a number"
            raise ValueError(f"{where}: {field}: expected {expected}, got {json.dumps(value)[:40]}")


def _pair(c) -> bool:
    return (
        isinstance(c, list) and len(c) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in c)
    )


def _lock_error(message: str, path: str) -> ValueError:
    return ValueError(f"{path}: {message}")


def _compared(settings):
    """Settings as two runs compare them: not the folder's own name (``qs``, ``./qs``, or moved, it is
    the same run), nor --restart; an --epsilon written as a number (before a game could have its own)
    as the text it is now."""
    if not isinstance(settings, dict):
        return settings
    compared = {k: v for k, v in settings.items() if k not in ("out", "restart")}
    if type(compared.get("epsilon")) in (int, float):
        from atari_data.produce.generate import epsilon_flag

        compared["epsilon"] = epsilon_flag(float(compared["epsilon"]), {})
    return compared


def _is_settings(made) -> bool:
    return isinstance(made, dict) and {"games", "steps", "model", "seed"} <= made.keys()


def _differences(made, wanted: dict) -> str:
    if not isinstance(made, dict):
        return "not a quickstart's settings"
    flags = sorted(k for k in made.keys() | wanted.keys() if made.get(k) != wanted.get(k))
    return ", ".join(f"--{k.replace('_', '-')} {made.get(k)!r} there, {wanted.get(k)!r} now" for k in flags)


def _baseline_rows(results: dict) -> list[str]:
    rows = []
    for game, g in sorted(results.get("games", {}).items()):
        b = g.get("baseline")
        if b:
            rows.append(f"| {game} | {b['expert']:g} | {b['random']:g} | {b.get('cap') or 'none'} | {b['source']} |")
        else:
            rows.append(f"| {game} | | | | none: not normalised |")
    return rows


def _markdown_table(df) -> str:
    cols = df.columns
    rows = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    rows += ["| " + " | ".join("" if v is None else str(v) for v in r) + " |" for r in df.iter_rows()]
    return "\n".join(rows)


def plot_training(curve: list, log: list[dict]) -> bytes:
    """The training curve and validation NLL as PNG bytes (written atomically by the caller)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    if curve:
        ax.plot([c[0] for c in curve], [c[1] for c in curve], lw=1, label="training loss (20-step mean)")
    if log:
        ax.plot([e["step"] for e in log], [e["nll"] for e in log], "o-", label="validation NLL")
    ax.set_xlabel("step")
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    return png.getvalue()
