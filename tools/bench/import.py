"""Importers against plainly decoding the same source files.

Writes a JAT-layout Parquet config and an Atari-HEAD-layout game zip from real ALE screens
(random play in Breakout), then measures, in one run, frames/s of

- ``atari-data import jat`` against reading the Parquet rows and decoding every RGBA PNG stack, on
  as many threads as the importer decodes on (``frame_threads``);
- ``atari-data import atari_head`` against opening the zip, decompressing every trial's tar.bz2
  and checking every PNG as the importer does (``png_size``: it copies the frames, it does not
  decode them).

    uv run python tools/bench/import.py [--frames 4000]

Goal: every importer at least 0.5x its plain decode.

Each import writes one small PNG file per frame, and creating a file on this machine's ext4 disk
costs anywhere from ~25 us to ~800 us: kernel CPU in the inode allocator, which turns slow in a
block group where many files were deleted (earlier test runs, this very benchmark) and stays slow
for minutes; a fresh temporary folder lands in a fast or a slow group. So every import is timed
twice: writing to the disk (what a user gets, today, here) and writing to memory (tmpfs,
``/dev/shm``: the importer's own work, which the goal is about).
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import ale_py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _timing import in_rounds
from ale_py import roms
from PIL import Image

from atari_data.layout.png import decode_png, encode_png, png_size
from atari_data.produce.sources import atari_head, jat
from atari_data.threads import frame_threads
from laya_protocol.games import FULL_ACTIONS, minimal_actions


def screens(n: int) -> list[np.ndarray]:
    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.loadROM(roms.get_rom_path("breakout"))
    acts, rng, out = ale.getMinimalActionSet(), np.random.default_rng(0), []
    while len(out) < n:
        for _ in range(4):
            ale.act(acts[rng.integers(len(acts))])
        out.append(ale.getScreenRGB())
        if ale.game_over():
            ale.reset_game()
    return out


def write_jat(root: Path, rgb: list[np.ndarray], per_game: int = 500) -> None:
    grey = [np.asarray(Image.fromarray(f).convert("L").resize((84, 84), Image.BILINEAR)) for f in rgb]
    games = []
    for start in range(0, len(grey), per_game):
        frames, pngs = grey[start : start + per_game], []
        for t in range(len(frames)):
            stack = np.stack([frames[max(0, t - k)] for k in (3, 2, 1, 0)], -1)
            buf = io.BytesIO()
            Image.fromarray(stack, "RGBA").save(buf, format="PNG")
            pngs.append({"bytes": buf.getvalue(), "path": None})
        games.append((pngs, [t % 4 for t in range(len(frames))]))
    (root / "atari-breakout").mkdir(parents=True)
    typ = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(
        pa.table(
            {
                "image_observations": pa.array([g[0] for g in games], typ),
                "discrete_actions": pa.array([g[1] for g in games], pa.list_(pa.int64())),
                "rewards": pa.array([[0.0] * len(g[1]) for g in games], pa.list_(pa.float32())),
            }
        ),
        root / "atari-breakout" / "train-00000-of-00001.parquet",
    )


def write_atari_head(root: Path, rgb: list[np.ndarray], per_trial: int = 1000) -> None:
    minimal = [FULL_ACTIONS.index(a) for a in minimal_actions("Breakout")]
    rows = ["GameName,trial_id,subject_id,load_trial"]
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / "breakout.zip", "w") as z:
        for trial, start in enumerate(range(0, len(rgb), per_trial), 1):
            stem, utid = f"{trial}_RZ_{1000 + trial}_Aug-10-14-52-42", 1000 + trial
            lines, buf = [",".join(atari_head.HEADER)], io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:bz2") as tar:
                for n, f in enumerate(rgb[start : start + per_trial], 1):
                    png = encode_png(f)
                    info = tarfile.TarInfo(f"{stem}/{utid}_{n}.png")
                    info.size = len(png)
                    tar.addfile(info, io.BytesIO(png))
                    lines.append(f"{utid}_{n},0,{n},50,0,{minimal[n % len(minimal)]},80.5,100.5")
            z.writestr(f"{stem}.tar.bz2", buf.getvalue())
            z.writestr(f"{stem}.txt", "\n".join(lines) + "\n")
            rows.append(f"breakout,{trial},RZ,0")
    (root / "meta_data.csv").write_text("\n".join(rows) + "\n")


def _decoded(frames: list[bytes]) -> int:
    for f in frames:
        decode_png(f)
    return len(frames)


def plain_jat(root: Path) -> int:
    from concurrent.futures import ThreadPoolExecutor

    n = 0
    with ThreadPoolExecutor(frame_threads()) as pool:  # the importer's threads: libdeflate lets go of the GIL
        for path in sorted(root.glob("atari-*/*.parquet")):
            for row in pq.read_table(path, columns=["image_observations"]).to_pylist():
                frames = [obs["bytes"] for obs in row["image_observations"]]
                # handed out in the importer's own tasks of FRAMES_PER_TASK: a task per frame would
                # charge the reference a dispatch the importer does not pay
                step = jat.FRAMES_PER_TASK
                n += sum(pool.map(_decoded, [frames[i : i + step] for i in range(0, len(frames), step)]))
    return n


def plain_atari_head(root: Path) -> int:
    n = 0
    with zipfile.ZipFile(root / "breakout.zip") as z:
        for name in z.namelist():
            if name.endswith(".tar.bz2"):
                with tarfile.open(fileobj=io.BytesIO(z.read(name)), mode="r:bz2") as tar:
                    for m in tar:
                        if m.isfile():
                            png_size(tar.extractfile(m).read())
                            n += 1
    return n


def file_cost(folder: Path, n: int = 500) -> float:
    """Microseconds to create one empty file in a fresh folder: what the disk charges right now."""
    folder.mkdir()
    os.sync()
    t = time.perf_counter()
    for i in range(n):
        os.close(os.open(folder / f"{i}.png", os.O_WRONLY | os.O_CREAT, 0o644))
    return (time.perf_counter() - t) / n * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=4000)
    ap.add_argument("--memory", type=Path, default=Path("/dev/shm"), help="a tmpfs folder (default /dev/shm)")
    ap.add_argument("--smoke", action="store_true", help="200 frames: checks the bench runs (the tests run it)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.frames = 200
    if not args.memory.is_dir():
        raise SystemExit(f"{args.memory}: no such folder; pass --memory with a tmpfs folder")
    rgb = screens(args.frames)
    caps = {"train": 10**9, "val": 10**9}
    rows = []
    with tempfile.TemporaryDirectory() as disk, tempfile.TemporaryDirectory(dir=args.memory) as memory:
        disk, memory = Path(disk), Path(memory)
        write_jat(disk / "jat", rgb)
        write_atari_head(disk / "ah", rgb)
        for name, plain, module, src in (
            ("jat", plain_jat, jat, disk / "jat"),
            ("atari_head", plain_atari_head, atari_head, disk / "ah"),
        ):
            probe = file_cost(disk / f"{name}-probe")
            folders = itertools.count()  # a fresh output folder every call: nothing to replace

            def imported(where: Path, module=module, src=src, name=name, folders=folders) -> None:
                module.import_game(src, where / f"{name}-{next(folders)}", "Breakout", caps=caps)

            seconds, _ = in_rounds(
                {
                    "plain": lambda plain=plain, src=src: plain(src),
                    "disk": lambda: imported(disk),
                    "memory": lambda: imported(memory),
                },
                rounds=3,
                before=os.sync,  # untimed: the last call's files are on disk first, so none pays for another's
            )
            rows.append((name, min(seconds["plain"]), probe, min(seconds["disk"]), min(seconds["memory"])))
    print(
        f"{args.frames} Breakout frames per source, best of 3 rounds in alternating order after an untimed "
        f"call of each; jat's plain decode on {frame_threads()} threads"
    )
    print(
        "| importer | plain decode frames/s | new file on disk us | import to disk frames/s | ratio "
        "| import to memory frames/s | ratio | goal (to memory) |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    n = args.frames
    for name, base, probe, on_disk, in_memory in rows:
        print(
            f"| {name} | {n / base:,.0f} | {probe:.0f} | {n / on_disk:,.0f} | {base / on_disk:.2f}x "
            f"| {n / in_memory:,.0f} | {base / in_memory:.2f}x | >= 0.5x |"
        )


if __name__ == "__main__":
    main()
