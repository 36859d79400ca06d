"""The one episode writer every generator and importer goes through.

A source yields episodes, each a stream of :class:`Step` s. The writer applies, in one place:
the caps per split, even subsampling across episodes, the split by episode, the two-frame rule,
write-time validation of every record, and a meta.json computed from what was actually written.
A game is assembled in a hidden folder and moved into place whole; ``_READY`` comes last.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import EPISODE_KEYS, EPISODES, META, GameDir, GameLock, split_file_name, staged_game
from atari_data.layout.png import encode_png, formats_of, frame_defect
from atari_data.layout.records import GameRules, image_name, record_line
from atari_data.layout.validate import commit_game
from atari_data.schema import FRAME_FORMAT_RE, SCHEMA_VERSION, check_structure, frame_size
from atari_data.schema import META as META_SCHEMA
from laya_protocol.files import write_file, writing
from laya_protocol.games import emulator, minimal_actions
from laya_protocol.names import SPLITS
from laya_protocol.protocol import Protocol

log = logging.getLogger(__name__)

DEFAULT_CAPS = {"train": 20_000, "val": 1_000}

Frame = np.ndarray | bytes  # an array to encode, or an already encoded PNG / JPEG


@dataclass
class Step:
    """One decision of an episode, as a source yields it.

    ``after_fire`` marks the first decision after an auto-FIRE: its previous frame is a copy of
    its own (as on an episode's first decision). ``prev_frame`` overrides the previous frame for
    sources that record it themselves. ``side`` holds images that travel beside the frame (a
    segmentation mask, ...): each is written as ``images/<id>_<name>.png`` and its path is put
    in the record's provenance under ``name``.
    """

    frame: Frame
    label: int
    target: Sequence[float] | None = None
    provenance: dict | None = None
    after_fire: bool = False
    prev_frame: Frame | None = None
    side: dict[str, Frame] | None = None


@dataclass
class _Kept:
    episode: int
    step: int
    label: int
    target: list | None
    provenance: dict | None
    image: bytes
    prev: bytes | None
    side: dict[str, bytes] | None = None


def encode_frame(frame: Frame) -> bytes:
    return frame if isinstance(frame, bytes) else encode_png(frame)


def _suffix(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    raise AtariDataError("encoded frame is neither PNG nor JPEG", field="image")


class _EvenSampler:
    """Keeps an even subset of each episode's steps, and of the pool across episodes.

    Within an episode, a stride-doubling reservoir: keep steps at multiples of the stride, and
    double the stride (dropping the steps in between) whenever more than two caps are held, so an
    episode of any length costs at most two caps of memory and still holds at least one cap when
    it is long enough. Across episodes, the pool is halved the same way when it grows past four
    caps; the final pick is evenly spaced.
    """

    def __init__(self, cap: int):
        self.cap = cap
        self.pool: list[_Kept] = []

    def stride_for(self, held: int, stride: int) -> int:
        return stride * 2 if held > 2 * self.cap else stride

    def add_episode(self, kept: list[_Kept]) -> None:
        self.pool.extend(kept)
        if self.cap and len(self.pool) > 4 * self.cap:
            self.pool = self.pool[::2]

    def pick(self) -> list[_Kept]:
        n = len(self.pool)
        if n <= self.cap:
            return list(self.pool)
        idx = np.linspace(0, n - 1, self.cap).round().astype(int)
        return [self.pool[i] for i in idx]


@dataclass
class GameWriter:
    """Write one (source, game) folder of a layout.

    >>> with GameWriter(root, "expert2f", "Pong", frames=2, frame_format="rgb_210x160",
    ...                 origin="built-in expert", license="MIT") as w:
    ...     if not w.complete:
    ...         for n, split, steps in episodes:
    ...             w.add_episode(n, split, steps)
    ...         w.finish()

    A writer holds the game's :class:`~atari_data.layout.GameLock` from construction until
    ``finish`` or ``close``: a second writer of the same game fails at once with one line.
    """

    root: Path | str
    source: str
    game: str
    frame_format: str
    origin: str
    license: str
    frames: int = 1
    actions: Sequence[str] | None = None
    caps: dict = field(default_factory=lambda: dict(DEFAULT_CAPS))
    platform: str = "ale"
    protocol: Protocol | None = None
    seed: int | None = None
    force: bool = False
    progress: Any = None  # anything with update(n), e.g. a tqdm bar: advanced one per episode

    def __post_init__(self):
        self.root = Path(self.root)
        self.dir = GameDir(self.root, self.source, self.game)
        self._lock: GameLock | None = None
        if self.actions is None:
            self.actions = minimal_actions(self.game)
        self.rules = GameRules(self.source, self.game, tuple(self.actions), self.frames, self.platform)
        m = FRAME_FORMAT_RE.match(self.frame_format)
        if not m:
            raise AtariDataError(f"{self.frame_format!r} is not <rgb|gray>_<height>x<width>", field="frame_format")
        self._shape = (int(m[2]), int(m[3])) + ((3,) if m[1] == "rgb" else ())
        self._mode_size = frame_size(self.frame_format)
        unknown = set(self.caps) - set(SPLITS)
        if unknown:
            raise AtariDataError(f"unknown split {sorted(unknown)} (expected train, val)", field="caps")
        self.caps = {s: int(self.caps.get(s, DEFAULT_CAPS[s])) for s in SPLITS}
        self._samplers = {s: _EvenSampler(self.caps[s]) for s in SPLITS}
        self._episodes: dict[int, str] = {}
        self._replays: dict[int, dict] = {}
        self.dropped: Counter = Counter()
        self._lock = GameLock(self.root, self.source, self.game)  # held until finish() or close()

    def close(self) -> None:
        """Release the game's lock (``finish`` does it too); nothing is written."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> GameWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def complete(self) -> bool:
        """The game is already written and ready (and ``force`` is off): nothing to do.

        A ready game written with other settings than this writer's is refused, naming the first
        that differs: kept, it would pass for the records asked for.
        """
        if not self.dir.ready or self.force:
            return False
        written = self.dir.meta()
        for key, asked in self.settings().items():
            held = written.get(key)
            if held != asked and isinstance(held, dict) and isinstance(asked, dict):  # name the part
                key, held, asked = next(
                    (f"{key}.{k}", held.get(k), asked.get(k)) for k in {**held, **asked} if held.get(k) != asked.get(k)
                )
            if held != asked:
                raise self.held_otherwise(key, held, asked)
        return True

    def held_otherwise(self, key: str, held: Any, asked: Any) -> AtariDataError:
        """The error of a ready game whose meta.json field ``key`` holds other than a rerun asks."""
        return AtariDataError(
            f"written with {held!r}, this run asks for {asked!r}: pass --force to replace the game",
            file=f"{self.source}/{self.game}/{META}",
            field=key,
        )

    def settings(self) -> dict[str, Any]:
        """The meta.json fields this writer fixes before a record is played: a ready game that
        holds others is another game."""
        return {
            "platform": self.platform,
            "frame_format": self.frame_format,
            "frames": self.frames,
            "actions": list(self.rules.actions),
            "caps": dict(self.caps),
            "origin": self.origin,
            "license": self.license,
            "protocol": None if self.protocol is None else self.protocol.to_dict(),
            "seed": self.seed,
        }

    def drop(self, reason: str, n: int = 1) -> None:
        """Count frames the source could not write, by reason (they go into meta.json)."""
        self.dropped[reason] += n

    def add_episode(self, episode: int, split: str, steps: Iterable[Step], replay: dict | None = None) -> int:
        """Consume one episode's steps; returns how many decisions it had.

        ``replay`` (filled by the source by the time the steps run out) holds what replays the
        episode: ``seed``, ``moves`` and ``decisions``; it is written to ``episodes.jsonl``.
        """
        if replay is not None:
            self._replays[episode] = replay
        if split not in SPLITS:
            raise AtariDataError(f"unknown split {split!r} (expected train or val)", field="split")
        if episode in self._episodes:
            raise AtariDataError(
                f"episode {episode} was already added (to {self._episodes[episode]}); "
                "episode numbers must be unique per game",
                field="episode",
            )
        self._episodes[episode] = split
        sampler = self._samplers[split]
        kept: list[_Kept] = []
        stride, n = 1, 0
        last_frame: Frame | None = None
        last_png: tuple[int, bytes] | None = None  # (step, bytes) of the last encoded frame
        for n, st in enumerate(steps):
            if n % stride == 0 and sampler.cap:
                png = encode_frame(self._checked(st.frame, episode, n))
                prev = None
                if self.frames == 2:
                    prev = self._prev_png(st, n, last_frame, last_png, png)
                target = None if st.target is None else [float(x) for x in st.target]
                side = {k: encode_frame(v) for k, v in st.side.items()} if st.side else None
                kept.append(_Kept(episode, n, int(st.label), target, st.provenance, png, prev, side))
                last_png = (n, png)
                new_stride = sampler.stride_for(len(kept), stride)
                if new_stride != stride:
                    stride = new_stride
                    kept = [k for k in kept if k.step % stride == 0]
            last_frame = st.frame
        sampler.add_episode(kept)
        if self.progress is not None:
            self.progress.update(1)
        return n + 1 if last_frame is not None else 0

    def _prev_png(self, st: Step, n: int, last_frame, last_png, png: bytes) -> bytes:
        if st.prev_frame is not None:
            return encode_frame(self._checked(st.prev_frame, -1, n))
        if n == 0 or st.after_fire:
            return png
        if last_png is not None and last_png[0] == n - 1:
            return last_png[1]  # the previous decision was kept too: reuse its encoding
        return encode_frame(last_frame)

    def _checked(self, frame: Frame, episode: int, step: int) -> Frame:
        if isinstance(frame, np.ndarray) and (frame.shape != self._shape or frame.dtype != np.uint8):
            raise AtariDataError(
                f"episode {episode} step {step}: frame is {frame.dtype} {frame.shape}, expected uint8 "
                f"{self._shape} for {self.frame_format}",
                field="image",
            )
        why = self.frame_defect(frame) if isinstance(frame, bytes) else None
        if why:  # a source that copies frames drops what is not the game's first (frame_defect)
            raise AtariDataError(f"episode {episode} step {step}: frame {why}", field="image")
        return frame

    def frame_defect(self, data: bytes) -> str | None:
        """What ``validate --images`` would say of an encoded frame in this game, or None: a source
        that copies frames asks first, and drops (counts) the ones that are not the game's."""
        try:
            formats = formats_of("frame" + _suffix(data))
        except AtariDataError as e:
            return e.message
        return frame_defect(data, formats, self._mode_size)

    def finish(self, baselines: dict | None = None) -> dict:
        """Write the game folder, then ``_READY``, and release the lock; returns the meta.json written."""
        try:  # the staging folder goes whatever happens: a refused or interrupted game leaves nothing
            with staged_game(self.root, self.source, self.game, "partial") as staged:
                return self._finish(staged, baselines)
        finally:
            self.close()

    def _finish(self, staged: GameDir, baselines: dict | None) -> dict:
        picked = {s: sorted(self._samplers[s].pick(), key=lambda k: (k.episode, k.step)) for s in SPLITS}
        if not any(picked.values()) and any(self.caps.values()):  # nothing to train on is no game
            drops = ", ".join(f"{reason} {n}" for reason, n in sorted(self.dropped.items()))
            why = f"every step was dropped ({drops})" if drops else "the source held no steps"
            raise AtariDataError(f"no records to write: {why}", file=f"{self.source}/{self.game}", field="(records)")
        tmp = staged.path

        splits: dict[str, dict] = {}
        files: list[tuple[Path, bytes]] = []
        for split in SPLITS:
            lines: list[bytes] = []
            labels: Counter[str] = Counter()
            episodes: set[int] = set()
            for k in picked[split]:
                provenance = k.provenance
                if k.side:
                    rid = self.rules.record_id(k.episode, k.step)
                    paths = {name: image_name(rid, _suffix(data), name) for name, data in k.side.items()}
                    provenance = {**(provenance or {}), **paths}
                    files.extend((tmp / paths[name], data) for name, data in k.side.items())
                rec = self.rules.record(k.episode, k.step, k.label, k.target, provenance, suffix=_suffix(k.image))
                defects = self.rules.check(rec)
                if defects:
                    f, msg = defects[0]
                    raise AtariDataError(msg, file=f"{self.source}/{self.game}/{split_file_name(split)}", field=f)
                files.append((tmp / rec["image"], k.image))
                if k.prev is not None:
                    files.append((tmp / rec["prev_image"], k.prev))
                lines.append(record_line(rec))
                labels[self.rules.actions[k.label]] += 1
                episodes.add(k.episode)
            write_file(tmp / split_file_name(split), b"".join(line + b"\n" for line in lines), sync=True)
            splits[split] = {
                "records": len(lines),
                "episodes": len(episodes),
                "labels": {a: labels[a] for a in self.rules.actions if labels[a]},
            }

        kept_episodes = {k.episode for s_ in SPLITS for k in picked[s_]}
        if self._replays:
            eps = ({"episode": e, "split": self._episodes[e], **self._replays[e]} for e in sorted(self._replays))
            replays = [
                json.dumps({k: ep[k] for k in EPISODE_KEYS}, separators=(",", ":"))
                for ep in eps
                if ep["episode"] in kept_episodes
            ]
            write_file(tmp / EPISODES, "".join(line + "\n" for line in replays), sync=True)
        # One thread: creating a file is CPU work in the kernel (ext4's inode allocator), and threads
        # contend (4,000 files: 0.11-0.16 s on one thread, 0.16-0.28 s on 2, 0.26-0.39 s on 8).
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        for path, data in files:  # os.open: no buffered file object for one write (a third faster)
            fd = os.open(path, flags, 0o644)
            try:
                view = memoryview(data)
                with writing(path):  # a write's own error names no file
                    while view:  # a regular file takes it in one write; a full disk raises
                        view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        meta = {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "game": self.game,
            "platform": self.platform,
            "frame_format": self.frame_format,
            "frames": self.frames,
            "actions": list(self.rules.actions),
            "caps": dict(self.caps),
            **splits,
            "dropped": dict(sorted(self.dropped.items())),
            "origin": self.origin,
            "license": self.license,
        }
        if self.protocol is not None:
            meta["protocol"] = self.protocol.to_dict()
            if self.platform == "ale":  # played here: the emulator replay and evaluation depend on
                meta["emulator"] = emulator(self.game)
        if baselines is not None:
            meta["baselines"] = baselines
        if self.seed is not None:
            meta["seed"] = self.seed
        defects = check_structure(meta, META_SCHEMA)
        if defects:
            f, msg = defects[0]
            raise AtariDataError(msg, file=f"{self.source}/{self.game}/{META}", field=f)
        write_file(tmp / META, json.dumps(meta, indent=2, ensure_ascii=False, allow_nan=False) + "\n", sync=True)

        # The validator's view of what was written (records, files, first-step copies, meta.json against
        # the records), so a source that copies frames it was given cannot slip a broken game in; then
        # the finished folder is swapped in (an old one goes only after) and marked ready.
        commit_game(staged, images=False, file=f"{self.source}/{self.game}")
        log.info(
            "%s/%s: %d train, %d val records",
            self.source,
            self.game,
            splits["train"]["records"],
            splits["val"]["records"],
        )
        return meta


#: The share of episodes that go to val where a source has no splits of its own (Atari-HEAD, PlayJev).
VAL_FRACTION = 0.05


def assign_splits(episodes: Sequence[int], val_fraction: float = VAL_FRACTION) -> dict[int, str]:
    """Split episode numbers about ``val_fraction`` to val, evenly spread, deterministic.

    With two or more episodes at least one goes to val and at least one to train.
    """
    eps = sorted(episodes)
    if len(eps) < 2:
        return {e: "train" for e in eps}
    n_val = min(len(eps) - 1, max(1, round(len(eps) * val_fraction)))
    # The centres of n_val equal bins over the sorted episodes.
    val_idx = {int((i + 0.5) * len(eps) / n_val) for i in range(n_val)}
    return {e: "val" if i in val_idx else "train" for i, e in enumerate(eps)}
