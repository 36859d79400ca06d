"""Atari-HEAD (Zenodo record 3451402, CC-BY-4.0) -> source ``atari_head``.

A local copy holds ``meta_data.csv`` and one ``<game>.zip`` per game (snake_case names). Inside a
zip, each trial is a ``<stem>.tar.bz2`` of PNG frames (``<stem>/<UTID>_<n>.png``, ``n`` not
zero-padded) and a ``<stem>.txt`` label file (``frame_id,episode_id,score,duration(ms),
unclipped_reward,action,gaze_positions``, the literal ``null`` for missing values, then a
variable number of gaze ``x,y`` pairs). Actions are ALE full 18-action ids, mapped by name to the
game's minimal set. Trials continued from another (``load_trial`` in meta_data.csv) form one
group, and whole groups go to val until about 5% of the frames are there. Frames (210x160 RGB)
are copied byte for byte; gaze positions, score and timing go to each record's provenance. Half a
trial (frames without labels, or labels without frames) and a PNG elsewhere in a trial's tar, or
twice, are errors: skipped or used, each would change the data without a word.
"""

from __future__ import annotations

import bz2
import csv
import io
import logging
import math
import re
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.layout.png import SIGNATURE as PNG_SIGNATURE
from atari_data.layout.writer import VAL_FRACTION, GameWriter, Step
from atari_data.play.actions import minimal_index, minimal_labels, resolve_game
from atari_data.schema import ALE_FRAME_FORMAT
from laya_protocol.games import minimal_actions

log = logging.getLogger(__name__)

SOURCE = "atari_head"
ORIGIN = "Atari-HEAD, Zenodo record 3451402"
REPO = None  # on Zenodo, not the Hub
LICENSE = "CC-BY-4.0"
HEADER = ["frame_id", "episode_id", "score", "duration(ms)", "unclipped_reward", "action", "gaze_positions"]
TRIAL_NUMBER = re.compile(r"[0-9]{1,9}")  # ASCII digits, as many as an int holds
STEM = re.compile(r"^([0-9]{1,9})_([A-Za-z]+)_([0-9]+)_(.+)$")  # <trial>_<subject>_<UTID>_<date>


@dataclass
class Trial:
    trial: int
    stem: str
    frames_tar: str  # member names inside the game zip
    labels_txt: str
    rows: list[dict] = field(default_factory=list)


def zip_name(game: str) -> str:
    """``MsPacman`` -> ``ms_pacman.zip``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower() + ".zip"


def game_of_zip(name: str) -> str:
    return resolve_game(Path(name).stem)


def available_games(root: Path) -> list[str]:
    out = []
    for p in sorted(root.glob("*.zip")):
        try:
            out.append(game_of_zip(p.name))
        except AtariDataError:  # not a game archive: said, as a misnamed game's would be lost without a word
            log.warning("%s: no game's name (<game>.zip, e.g. breakout.zip, ms_pacman.zip); passed over", p)
    return sorted(out)


# -- the label file --------------------------------------------------------------------------------


def _value(text: str):
    return None if text in ("null", "") else text


def parse_labels(text: str, where: str) -> list[dict]:
    """Rows of a label file: six fixed fields, then the gaze tail as (x, y) pairs."""
    lines = text.splitlines()
    if not lines or [h.strip() for h in lines[0].split(",")] != HEADER:
        raise AtariDataError(f"header is not {','.join(HEADER)}", file=where, field="header")
    rows, seen = [], set()
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        parts = line.strip().split(",")
        if len(parts) < 6:
            raise AtariDataError(f"{len(parts)} fields (expected at least 6)", file=where, line=n, field="(row)")
        frame_id, episode, score, duration, reward, action = map(_value, parts[:6])
        if frame_id in seen:  # one frame, two records
            raise AtariDataError(f"{frame_id!r} is on an earlier line too", file=where, line=n, field="frame_id")
        seen.add(frame_id)
        tail = [_value(x) for x in parts[6:]]
        try:
            if tail == [None]:  # no gaze recorded
                tail = []
            if None in tail or len(tail) % 2:  # a value dropped or the pairs shifted, else
                raise ValueError(
                    f"gaze: {len(tail)} values{' with a null' if None in tail else ''}, expected x,y pairs"
                )
            nums = [_finite(x) for x in tail]
            gaze = [[nums[i], nums[i + 1]] for i in range(0, len(nums), 2)]
            rows.append(
                {
                    "frame_id": frame_id,
                    "episode": None if episode is None else _episode(episode),
                    "score": None if score is None else _finite(score),
                    "duration_ms": None if duration is None else _finite(duration),
                    "unclipped_reward": None if reward is None else _finite(reward),
                    "action": None if action is None else _action(action),
                    "gaze": gaze,
                }
            )
        except (ValueError, OverflowError) as e:  # OverflowError: int(float("inf"))
            raise AtariDataError(f"unparseable value ({e})", file=where, line=n, field="(row)") from None
    return rows


def _action(text: str) -> int | None:
    """An action id; a fractional one is no action (counted as invalid), not the id it truncates to."""
    x = _finite(text)
    return int(x) if x.is_integer() else None


def _episode(text: str) -> int:
    """An episode id: a whole number a meta.json and the episode numbering can hold."""
    x = _finite(text)
    if not x.is_integer() or not 0 <= x < 2**31:
        raise ValueError(f"episode {text!r} is not a whole number from 0 to {2**31 - 1:,}")
    return int(x)


def _finite(text: str) -> float:
    if "_" in text:  # Python's float() reads 1_0 as 10; the files write plain numbers
        raise ValueError(f"{text!r} is not a plain number")
    x = float(text)
    if not math.isfinite(x):  # named here, with its line, not later by the record check of the output
        raise ValueError(f"{text!r} is not a finite number")
    return x


# -- the archive -----------------------------------------------------------------------------------


def trials_in(archive: zipfile.ZipFile, where: str) -> dict[int, Trial]:
    """Pairs of ``<stem>.tar.bz2`` and ``<stem>.txt`` anywhere in the zip, by trial number."""
    tars: dict[str, str] = {}
    txts: dict[str, str] = {}
    for n in archive.namelist():
        for suffix, found in ((".tar.bz2", tars), (".txt", txts)):
            stem = Path(n).name.removesuffix(suffix)
            if not n.endswith(suffix):
                continue
            if stem in found and STEM.match(stem):  # a second copy (another folder, its name again) would win
                raise AtariDataError(
                    f"{Path(n).name} twice ({found[stem]} and {n}); one file a trial", file=where, field="(member)"
                )
            found[stem] = n
    trials: dict[int, Trial] = {}
    for stem in sorted(set(tars) ^ set(txts)):  # half a trial: a partial download, not nothing
        if STEM.match(stem):
            have, lacks = (tars[stem], ".txt") if stem in tars else (txts[stem], ".tar.bz2")
            raise AtariDataError(f"{have} has no {stem}{lacks} beside it", file=where, field="(member)")
    for stem in sorted(set(tars) & set(txts)):
        m = STEM.match(stem)
        if m:
            if int(m[1]) in trials:  # meta_data.csv links trials by number: two would be one
                raise AtariDataError(
                    f"trial {int(m[1])} twice ({trials[int(m[1])].stem} and {stem}); one number a trial",
                    file=where,
                    field="(member)",
                )
            trials[int(m[1])] = Trial(int(m[1]), stem, tars[stem], txts[stem])
    if not trials:
        raise AtariDataError("no trial (<trial>_<subject>_<UTID>_<date>.tar.bz2 with its .txt) found", file=where)
    return trials


def frames_of(archive: zipfile.ZipFile, trial: Trial, where: str) -> dict[str, bytes]:
    """PNG bytes by frame id (``<UTID>_<n>``) from the trial's tar.bz2."""
    name = f"{where}!{trial.frames_tar}"
    try:
        info = archive.getinfo(trial.frames_tar)
        limits.check("member", info.file_size, file=name, field="(member)", compressed=info.compress_size)
        # bz2.BZ2File inflates what each read asks for; tarfile's own "r|bz2" inflates each 10 KB it
        # reads in one call (a 785-byte stream of 1 GB of zeros was 1 GB at once, before any check)
        with (
            archive.open(info) as raw,
            bz2.BZ2File(raw) as inflating,
            tarfile.open(fileobj=inflating, mode="r|", tarinfo=_CappedTarInfo) as tar,
        ):
            out, inflated = {}, 0
            for member in tar:
                inflated += tarfile.BLOCKSIZE + member.size  # what the bz2 stream inflates to, declared up front
                limits.check("member", inflated, file=name, field="(member)", compressed=info.compress_size)
                if member.isfile() and member.name.endswith(".png"):
                    frame_id = Path(member.name).stem
                    if Path(member.name).parent.name != trial.stem or frame_id in out:  # one file a frame
                        raise AtariDataError(
                            f"{member.name}: is not <trial stem>/<frame id>.png, once",
                            file=name,
                            field="(member)",
                        )
                    limits.check("frame", member.size, file=f"{name}!{member.name}", field="image")
                    out[frame_id] = tar.extractfile(member).read()  # type: ignore[union-attr]  # isfile()
            return out
    except (*UNREADABLE, tarfile.TarError) as e:
        raise AtariDataError(f"{trial.frames_tar}: unreadable archive ({type(e).__name__}: {e})", file=where) from None


#: What reading a zip member may raise: damage, and (RuntimeError, NotImplementedError) a member
#: encrypted or compressed in a way zipfile does not read.
UNREADABLE = (EOFError, OSError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError)


#: The largest tar header extension (a pax header, a GNU long name) read: a trial's own are a few
#: hundred bytes, and tarfile parses a pax header with a regex quadratic in its digits (CVE-2024-6232,
#: not fixed in every Python this runs on: 200 KB took 41 s). All of one tar's together are held to a
#: record's limit, so that many small ones cannot add up, and at most 8 come before one member.
HEADER_MAX = 4 << 10
HEADERS_IN_A_ROW = 8


class _CappedTarInfo(tarfile.TarInfo):
    """A tar header whose own extension (a pax header, a GNU long name) is refused by its declared
    size before tarfile reads its body whole into memory; member bodies are checked by the caller."""

    def _proc_member(self, tarfile_):
        if self.type not in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, *tarfile.GNU_TYPES[:2]):
            tarfile_._in_a_row = 0  # type: ignore[attr-defined]
        else:
            # tallies on the TarFile read: tarfile holds every extension read, and reads the ones in a
            # row by recursion (300 were a RecursionError); a member has at most a few (pax, names)
            seen = getattr(tarfile_, "_extension_bytes", 0) + self.size
            in_a_row = getattr(tarfile_, "_in_a_row", 0) + 1
            tarfile_._extension_bytes, tarfile_._in_a_row = seen, in_a_row  # type: ignore[attr-defined]
            limits.check("record", seen, file=self.name, field="(tar header)")
            if in_a_row > HEADERS_IN_A_ROW:
                raise AtariDataError(
                    f"{in_a_row} tar header extensions in a row; a member has at most {HEADERS_IN_A_ROW}",
                    file=self.name,
                    field="(tar header)",
                )
            if self.size > HEADER_MAX:
                raise AtariDataError(
                    f"declares a {self.size:,}-byte tar header extension; at most {HEADER_MAX:,} bytes are read",
                    file=self.name,
                    field="(tar header)",
                )
        return super()._proc_member(tarfile_)


def _member_text(archive: zipfile.ZipFile, member: str, where: str) -> str:
    """A text member of the zip, within the size limits (its rows are held parsed), as UTF-8."""
    limits.check_parsed(archive.getinfo(member).file_size, file=where, field="(member)")
    try:
        return limits.zip_member(archive, member, "file", where, "(member)").decode("utf-8")
    except UnicodeDecodeError as e:
        raise AtariDataError(f"is not UTF-8 (byte {e.start})", file=where, field="(file)") from None
    except UNREADABLE as e:
        raise AtariDataError(f"unreadable ({type(e).__name__}: {e})", file=where, field="(member)") from None


def load_trial_links(root: Path, game: str) -> dict[int, int]:
    """trial -> the trial it continued from, for this game's rows of meta_data.csv."""
    path = root / "meta_data.csv"
    if not path.exists():
        raise AtariDataError("missing (the record's meta_data.csv is needed to group trials)", file=str(path))
    links = {}
    try:
        text = limits.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise AtariDataError(f"is not UTF-8 (byte {e.start})", file=str(path), field="(file)") from None
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        for column in ("GameName", "trial_id", "load_trial"):
            if column not in (reader.fieldnames or []):
                raise AtariDataError(f"missing column {column}", file=str(path), field=column)
        for row in reader:
            if any(row.get(c) is None for c in ("GameName", "trial_id", "load_trial")):
                raise AtariDataError(
                    f"has {len([v for v in row.values() if v is not None])} fields, short of the header's",
                    file=str(path),
                    line=reader.line_num,
                    field="(row)",
                )
            name = row["GameName"].removesuffix("_highscore")
            try:
                same = resolve_game(name) == game
            except AtariDataError:
                same = False
            if not same:
                continue
            load = row["load_trial"].strip() or "0"
            if not TRIAL_NUMBER.fullmatch(load):  # isdigit() takes "²", which int() refuses
                raise AtariDataError(
                    f"{row['load_trial'][:40]!r} is not a trial number",
                    file=str(path),
                    line=reader.line_num,
                    field="load_trial",
                )
            if int(load) > 0:
                if not TRIAL_NUMBER.fullmatch(row["trial_id"].strip()):
                    raise AtariDataError(
                        f"{row['trial_id']!r} is not a trial number",
                        file=str(path),
                        line=reader.line_num,
                        field="trial_id",
                    )
                links[int(row["trial_id"])] = int(row["load_trial"])
    except csv.Error as e:
        raise AtariDataError(f"is not CSV ({e})", file=str(path), field="(file)") from None
    return links


def split_groups(sizes: dict[int, int], links: dict[int, int]) -> dict[int, str]:
    """Trials chained by ``load_trial`` stay together; the newest groups go to val until about 5%
    of the frames are there (at least one group, and never every group)."""
    parent = {t: t for t in sizes}

    def find(t):
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for t, prev in links.items():
        if t in parent and prev in parent:
            parent[find(t)] = find(prev)
    groups: dict[int, list[int]] = {}
    for t in sorted(sizes):
        groups.setdefault(find(t), []).append(t)
    ordered = sorted(groups.values(), key=min, reverse=True)
    total, val, out = sum(sizes.values()), 0, {}
    for i, g in enumerate(ordered):
        to_val = len(ordered) > 1 and i < len(ordered) - 1 and (i == 0 or val < VAL_FRACTION * total)
        for t in g:
            out[t] = "val" if to_val else "train"
        if to_val:
            val += sum(sizes[t] for t in g)
    return out


#: Episodes are numbered trial x this + the run of episode ids in the trial's label file.
RUNS_A_TRIAL = 1000


def import_game(
    root: str | Path, out: str | Path, game: str, caps: dict | None = None, force: bool = False, progress=None
) -> dict | None:
    root, game = Path(root), resolve_game(game)
    path = root / zip_name(game)
    if not path.exists():
        raise AtariDataError(f"no {path.name} (a local copy of {ORIGIN})", file=str(root))
    actions = minimal_actions(game)
    labels = minimal_labels(game)
    with GameWriter(
        out,
        SOURCE,
        game,
        frame_format=ALE_FRAME_FORMAT,
        frames=1,
        actions=actions,
        origin=ORIGIN,
        license=LICENSE,
        force=force,
        progress=progress,
        caps=caps or {},  # the writer fills what is missing with its DEFAULT_CAPS
    ) as writer:
        if writer.complete:
            return None
        raw = limits.open_regular(path)  # a FIFO would hold ZipFile's open() for ever
        try:
            archive = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError) as e:
            raw.close()
            raise AtariDataError(f"not a readable zip ({type(e).__name__}: {e})", file=str(path)) from None
        with raw, archive:
            trials = trials_in(archive, str(path))
            # every trial's rows are held at once: their texts are charged together, not one by one
            texts = sum(archive.getinfo(t.labels_txt).file_size for t in trials.values())
            limits.check_parsed(texts, file=str(path), field=f"(the {len(trials)} label files)")
            for t in trials.values():
                t.rows = parse_labels(
                    _member_text(archive, t.labels_txt, f"{path}!{t.labels_txt}"), f"{path}!{t.labels_txt}"
                )
                if (runs := sum(1 for _ in _episodes(t.rows))) > RUNS_A_TRIAL:  # before anything is played
                    raise AtariDataError(
                        f"{runs:,} runs of episode ids; a trial's episodes are numbered trial x {RUNS_A_TRIAL} + "
                        f"run, so at most {RUNS_A_TRIAL} fit",
                        file=f"{path}!{t.labels_txt}",
                        field="episode_id",
                    )
            splits = split_groups({n: len(t.rows) for n, t in trials.items()}, load_trial_links(root, game))
            for n, t in sorted(trials.items()):
                frames = frames_of(archive, t, str(path))
                for k, (episode, rows) in enumerate(_episodes(t.rows)):
                    writer.add_episode(
                        n * RUNS_A_TRIAL + k, splits[n], _steps(rows, frames, labels, t, episode, writer)
                    )
        return writer.finish()


def _episodes(rows: list[dict]) -> Iterator[tuple[int | None, list[dict]]]:
    """Runs of rows with the same episode id, in file order."""
    run: list[dict] = []
    for r in rows:
        if run and r["episode"] != run[-1]["episode"]:
            yield run[-1]["episode"], run
            run = []
        run.append(r)
    if run:
        yield run[-1]["episode"], run


def _steps(rows, frames, labels, trial: Trial, episode, writer: GameWriter) -> Iterator[Step]:
    for r in rows:
        label = minimal_index(labels, r["action"])
        if isinstance(label, str):
            writer.drop(label)
            continue
        png = frames.get(r["frame_id"] or "")
        if png is None:
            writer.drop("missing_image")
            continue
        if not png.startswith(PNG_SIGNATURE) or writer.frame_defect(png):  # its member is named .png
            writer.drop("bad_image")
            continue
        yield Step(
            frame=png,
            label=label,
            provenance={
                "trial": trial.trial,
                "frame_id": r["frame_id"],
                "episode_id": episode,
                "score": r["score"],
                "duration_ms": r["duration_ms"],
                "unclipped_reward": r["unclipped_reward"],
                "gaze": r["gaze"],
            },
        )
