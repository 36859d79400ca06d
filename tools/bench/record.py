"""Recording and reading two-frame episodes: atari-data against Minari, on the same episodes.

Minari (Farama's offline-RL dataset library, which ships 57 Atari datasets) is what a user would
pick instead of `atari-data generate`. One run, one machine, the same work for both:

- **Write.** The same policy (Pong's built-in expert, epsilon 0.1, as `generate --source expert2f`
  plays it) plays the same number of decisions, in whole episodes capped at the same length (so
  every decision played is a record), under the
  same protocol (4 frames a decision, sticky actions 0.25, the minimal action set):
  (a) `atari-data generate` (layout: PNG frames + JSONL, validated), then `atari-data pack`, at
  its default (frames re-compressed at libdeflate level 9) and with `--png-level keep`, the two
  commands timed one after the other as a user runs them;
  (b) Minari's `DataCollector` around gymnasium's `ALE/Pong-v5`, then `create_dataset`, in each
  of its storage formats (hdf5, its default, and arrow), with its default JPEG images (lossy) and
  with `jpeg_encoding=False` (lossless, like our PNGs). Each timed write starts on a settled disk
  (:class:`Disk`), and the output says how the disk was.
- **Read.** Every two-frame sample (frame, previous frame) as uint8 arrays, as a training loader
  draws them: ours through the WebDataset helper, the Parquet reader
  (`atari_data.publish.parquet_rows.rows`) and `load_dataset(..., streaming=True)` on the pack;
  Minari's by `iterate_episodes` and by `sample_episodes` (its random access), each episode's
  observations sliced into (obs[t], obs[t-1]).
- **Bytes on disk** per record: every file each one wrote (a pack's row: the whole repository but
  the other format's shards).

    uv run python tools/bench/record.py [--decisions 4000] [--cap 500]
    uv run python tools/bench/record.py --smoke   # 100 decisions (the tests run it)

Goal: ahead of Minari on all three (records/s written, samples/s read, bytes per record).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from _timing import in_rounds

from laya_protocol.protocol import FRAMESKIP, STICKY_ACTIONS

GAME = "Pong"
EPSILON = 0.1


class Disk:
    """Before each timed write: flush, then wait until creating a small file takes its quiet time.

    This machine's disk (a virtual disk mounted with ``discard``) creates a file in about 25 us,
    but in up to 900 us for minutes after many files were deleted anywhere on it (an earlier run's
    temporary folders, a test suite). Ours writes a file per frame and Minari one file, so that
    backlog is not either writer's cost; it is probed (200 files of 800 bytes, kept until the end)
    and reported beside the results."""

    def __init__(self, folder: Path, quiet_us: float = 100.0, patience_s: float = 600.0):
        self.folder, self.quiet_us, self.patience_s = folder, quiet_us, patience_s
        self.probes: list[float] = []  # us a file at the last probe before each timed write
        self.waited = 0.0
        self._made = 0

    def _probe(self) -> float:
        self._made += 1
        folder = self.folder / f"probe-{self._made}"
        folder.mkdir(parents=True)
        data = bytes(800)
        t = time.perf_counter()
        for i in range(200):
            fd = os.open(folder / f"{i}.png", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
        return (time.perf_counter() - t) / 200 * 1e6

    def settle(self) -> None:
        os.sync()  # the earlier writers' dirty pages are nobody's cost
        start = time.perf_counter()
        while (us := self._probe()) > self.quiet_us and time.perf_counter() - start < self.patience_s:
            time.sleep(5)
        self.waited += time.perf_counter() - start
        self.probes.append(us)

    def report(self) -> str:
        slow = sum(us > self.quiet_us for us in self.probes)
        return (
            f"disk before each of {len(self.probes)} timed writes: {np.median(self.probes):.0f} us a file creation "
            f"(median; quiet is under {self.quiet_us:.0f}); waited {self.waited:.0f} s for it in all; "
            f"{slow} writes timed on a slower disk"
        )


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ours_write(
    root: Path, decisions: int, cap: int, disk: Disk, out: str, level: int | None
) -> tuple[float, float, int]:
    """(seconds for generate, seconds for generate and then pack into ``root/out`` at PNG level
    ``level``, records written): the two commands one after the other, as a user runs them, on a disk
    settled before the first only (generate's writeback is part of what pack meets)."""
    from atari_data.produce.generate import GenerateConfig, generate
    from atari_data.publish.pack import PackConfig, pack

    val = cap  # whole capped episodes in both splits, so every decision played is a record
    cfg = GenerateConfig(
        root=str(root / f"layout-{out}"),
        games=[GAME],
        source="expert2f",
        train_frames=decisions - val,
        val_frames=val,
        min_train_episodes=1,
        baseline_episodes=0,
        decision_cap=cap,
        epsilon=EPSILON,
        workers=1,
    )
    disk.settle()
    t = time.perf_counter()
    meta = generate(cfg, progress=False)[GAME]
    t_gen = time.perf_counter() - t
    pack(PackConfig(root=cfg.root, out=str(root / out), sources=["expert2f"], shard_size=64_000_000, png_level=level))
    return t_gen, time.perf_counter() - t, meta["train"]["records"] + meta["val"]["records"]


def minari_write(dataset_id: str, decisions: int, cap: int, data_format: str, jpeg: bool, disk: Disk) -> float:
    """Seconds to play ``decisions`` decisions through Minari's DataCollector and write the dataset."""
    import ale_py
    import gymnasium as gym
    import minari

    from atari_data.play.experts.builtin import builtin_expert
    from atari_data.produce.generate import epsilon_expert
    from laya_protocol.games import minimal_actions

    gym.register_envs(ale_py)
    expert, behave = builtin_expert(GAME), epsilon_expert(EPSILON)
    rng = np.random.default_rng(0)
    disk.settle()
    t = time.perf_counter()
    env = minari.DataCollector(
        gym.make(f"ALE/{GAME}-v5", repeat_action_probability=STICKY_ACTIONS, frameskip=FRAMESKIP),
        data_format=data_format,
        jpeg_encoding=jpeg,
    )
    names = env.unwrapped.get_action_meanings()
    to_env = [names.index(a) for a in minimal_actions(GAME)]  # the expert's order to the env's
    ale = env.unwrapped.ale
    view = SimpleNamespace(ram=ale.getRAM)  # all a built-in expert reads of a game
    env.reset(seed=0)
    expert.reset()
    played = 0
    for n in range(decisions):
        move = behave(None, expert.probs(view), rng)  # type: ignore[arg-type]
        _obs, _r, terminated, truncated, _info = env.step(to_env[move])
        played += 1
        if (terminated or truncated or played == cap) and n + 1 < decisions:
            env.reset(seed=n)
            expert.reset()
            played = 0
    with warnings.catch_warnings():  # "eval_env is None": the collecting env is the evaluation env, as meant
        warnings.simplefilter("ignore")
        env.create_dataset(dataset_id=dataset_id, algorithm_name=f"builtin expert, epsilon {EPSILON}")
    env.close()
    return time.perf_counter() - t


def minari_read(dataset_id: str, sample: bool) -> int:
    """Two-frame samples read: every episode in order, or the episodes drawn by sample_episodes."""
    import minari

    ds = minari.load_dataset(dataset_id)
    episodes = ds.sample_episodes(ds.total_episodes) if sample else ds.iterate_episodes()
    n = 0
    for ep in episodes:
        obs = ep.observations  # uint8, (steps + 1, 210, 160, 3): reset screen, then one per step
        for t in range(1, len(obs)):
            frame, prev = obs[t], obs[t - 1]
            n += frame.shape[0] > 0 and prev.shape[0] > 0
    return n


def ours_read(repo: Path, how: str) -> int:
    n = 0
    if how == "parquet rows":
        from atari_data.publish.parquet_rows import rows

        for split in ("train", "validation"):
            for r in rows(repo, "expert2f", split):
                n += r["image"].shape[0] > 0 and r["prev_image"].shape[0] > 0
        return n
    if how == "load_dataset streaming":
        from datasets import load_dataset

        for split in ("train", "validation"):
            for r in load_dataset(str(repo), "expert2f", split=split, streaming=True):
                n += np.asarray(r["image"]).shape[0] > 0 and np.asarray(r["prev_image"]).shape[0] > 0
        return n
    from atari_data.publish.shards import records

    for r in records(sorted(str(p) for p in (repo / "webdataset").rglob("*.tar")), split=False):
        n += r["image"].shape[0] > 0 and r["prev_image"].shape[0] > 0
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=4000, help="decisions each recorder plays (default 4000)")
    ap.add_argument("--cap", type=int, default=500, help="decisions per episode at most (default 500)")
    ap.add_argument("--repeats", type=int, default=3, help="writes and reads are timed best of this many (default 3)")
    ap.add_argument(
        "--disk-patience", type=float, default=600, help="seconds to wait for a quiet disk before a timed write (600)"
    )
    ap.add_argument("--smoke", action="store_true", help="100 decisions, one repeat: checks the bench runs")
    args = ap.parse_args(argv)
    if args.smoke:
        args.decisions, args.cap, args.repeats = 100, 50, 1
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from atari_data.publish.pack import PackConfig

    packs = {"repo": PackConfig.png_level, "repo-keep": None}  # output folder: PNG level (the default; keep)
    with tempfile.TemporaryDirectory(dir=".", prefix=".bench-record-") as tmp:
        tmp_path = Path(tmp).resolve()  # Minari joins a relative MINARI_DATASETS_PATH twice
        os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "minari")
        os.environ["HF_DATASETS_CACHE"] = str(tmp_path / "hf-cache")
        # The smoke run (the tests) probes the disk but never waits for it.
        disk = Disk(tmp_path / "disk-probes", patience_s=0 if args.smoke else args.disk_patience)
        # Imports and first-use costs out of the comparison: each writer once at toy size (in the smoke
        # run too, so that a change of what generate accepts breaks the tests, not the next full run).
        for out, level in packs.items():
            ours_write(tmp_path / "warm-up", 40, 20, disk, out, level)
        for data_format in ("hdf5", "arrow"):
            minari_write(f"bench/warm-up/{data_format}-v0", 20, 20, data_format, True, disk)
        disk.probes.clear()
        args.decisions = max(2, args.decisions // args.cap) * args.cap  # whole episodes (see ours_write)
        # Writes are timed best of the repeats too, ours and Minari's taking turns: this disk's
        # file creation time swings 3-15x from one second to the next (kernel writeback).
        configs = [(f, j) for f in ("hdf5", "arrow") for j in (True, False)]
        # generate + pack is the best of the repeats' sums, each sum one repeat's two commands.
        t_gen, t_both, t_minari = float("inf"), dict.fromkeys(packs, float("inf")), dict.fromkeys(configs, float("inf"))
        for r in range(args.repeats):
            for out, level in packs.items():
                gen, both, n = ours_write(tmp_path / f"ours-{r}", args.decisions, args.cap, disk, out, level)
                t_both[out] = min(t_both[out], both)
                if out == "repo":  # generate alone: the best of the repeats, as each of Minari's writers
                    t_gen = min(t_gen, gen)
            for data_format, jpeg in configs:
                dataset_id = f"bench/{GAME.lower()}/{data_format}-{'jpeg' if jpeg else 'raw'}-{r}-v0"
                t_minari[data_format, jpeg] = min(
                    t_minari[data_format, jpeg], minari_write(dataset_id, n, args.cap, data_format, jpeg, disk)
                )
        last = tmp_path / f"ours-{args.repeats - 1}"
        readers, facts = {}, {}  # what -> how to read it; what -> (seconds to write, bytes on disk)
        for out, how in (("repo", "pack"), ("repo-keep", "pack --png-level keep")):
            repo = last / out
            for what in ("WebDataset helper", "parquet rows", "load_dataset streaming"):
                sub = "webdataset" if what == "WebDataset helper" else "parquet"
                label = f"atari-data generate + {how}, {sub} ({what})"
                readers[label] = lambda r=repo, w=what: ours_read(r, w)
                # the whole repository (card, meta, schema) but the other format's shards
                size = folder_bytes(repo) - folder_bytes(repo / ("data" if sub == "webdataset" else "webdataset"))
                facts[label] = (t_both[out], size)
        for data_format, jpeg in configs:
            dataset_id = f"bench/{GAME.lower()}/{data_format}-{'jpeg' if jpeg else 'raw'}-{args.repeats - 1}-v0"
            path = tmp_path / "minari" / dataset_id.replace("/", os.sep)
            for sample in (False, True):
                how = "sample_episodes" if sample else "iterate_episodes"
                images = "JPEG, its default" if jpeg else "raw arrays"
                label = f"Minari {data_format}, {images} ({how})"
                readers[label] = lambda d=dataset_id, s=sample: minari_read(d, s)
                facts[label] = (t_minari[data_format, jpeg], folder_bytes(path))
        seconds, got = in_rounds(readers, args.repeats)
        wrong = {what: k for what, k in got.items() if k != n}
        assert not wrong, f"read other than the {n} samples: {wrong}"
        rows = [  # what, seconds to write, samples read, seconds to read, bytes on disk
            ("atari-data generate (layout)", t_gen, None, None, folder_bytes(last / "layout-repo")),
            *((what, write, n, min(seconds[what]), size) for what, (write, size) in facts.items()),
        ]

    import minari

    print(f"{n} two-frame records of {GAME} (built-in expert, epsilon {EPSILON}, episodes of at most {args.cap})")
    print(f"minari {minari.__version__}; reads best of {args.repeats} rounds, each reader once a round")
    print(disk.report() + "\n")
    print("| what | records/s written | samples/s read | bytes per record |\n| --- | ---: | ---: | ---: |")
    for what, t_write, got, t_read, size in rows:
        read = f"{got / t_read:,.0f}" if got else "(not timed)"
        print(f"| {what} | {n / t_write:,.0f} | {read} | {size / n:,.0f} |")
    ours = [r for r in rows if r[0].startswith("atari-data")]
    peer = [r for r in rows if r[0].startswith("Minari")]
    print("\n| ours against Minari's best | ours | Minari | ratio | goal |\n| --- | ---: | ---: | ---: | ---: |")
    for what, mine, theirs, higher in (
        ("records/s written (generate)", n / ours[0][1], max(n / r[1] for r in peer), True),
        ("records/s written (generate + pack)", n / ours[1][1], max(n / r[1] for r in peer), True),
        ("records/s written (generate + pack --png-level keep)", n / ours[4][1], max(n / r[1] for r in peer), True),
        ("samples/s read", max(r[2] / r[3] for r in ours[1:]), max(r[2] / r[3] for r in peer), True),
        ("bytes per record", min(r[4] for r in ours) / n, min(r[4] for r in peer) / n, False),
    ):
        ratio = mine / theirs if higher else theirs / mine
        print(f"| {what} | {mine:,.0f} | {theirs:,.0f} | {ratio:.2f}x | > 1x |")
    # The fastest reader of each side, round by round: a ratio of two readings taken seconds apart.
    fast_ours = min(ours[1:], key=lambda r: r[3])[0]
    fast_peer = min(peer, key=lambda r: r[3])[0]
    paired = [b / a for a, b in zip(seconds[fast_ours], seconds[fast_peer], strict=True)]
    print(
        f"\nsamples/s read, round by round ({fast_ours} against {fast_peer}): median "
        f"{statistics.median(paired):.2f}x; each round: {', '.join(f'{x:.2f}x' for x in paired)}"
    )
    for what in (fast_ours, fast_peer):
        print(f"  {what}: {', '.join(f'{n / t:,.0f}' for t in seconds[what])} samples/s, round by round")


if __name__ == "__main__":
    main()
