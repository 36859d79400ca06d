"""Importers against plainly decoding the same source files.

Writes a JAT-layout Parquet config and an Atari-HEAD-layout game zip from real ALE screens
(random play in Breakout), then measures, in one run, frames/s of

- ``atari-data import jat`` against reading the Parquet rows and decoding every RGBA PNG stack;
- ``atari-data import atari_head`` against opening the zip, decompressing every trial's tar.bz2
  and decoding every PNG.

    uv run python tools/bench/import.py [--frames 4000]

Goal: every importer at least 0.5x its plain decode.

Each import also writes one small PNG file per frame, and creating small files on these shared
disks swings between ~0.03 and ~0.5 ms a file from one moment to the next. So the run also times
the file floor: writing the same files again into a fresh folder, with the writer's threads, right
after each import. ``without files`` is the import's rate with that floor taken out.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ale_py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from ale_py import roms
from PIL import Image

from atari_data.actions import FULL_ACTIONS, minimal_actions
from atari_data.png import decode_png, encode_png
from atari_data.sources import atari_head, jat
from atari_data.writer import FILE_WRITERS


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
        frames, pngs = grey[start: start + per_game], []
        for t in range(len(frames)):
            stack = np.stack([frames[max(0, t - k)] for k in (3, 2, 1, 0)], -1)
            buf = io.BytesIO()
            Image.fromarray(stack, "RGBA").save(buf, format="PNG")
            pngs.append({"bytes": buf.getvalue(), "path": None})
        games.append((pngs, [t % 4 for t in range(len(frames))]))
    (root / "atari-breakout").mkdir(parents=True)
    typ = pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image_observations": pa.array([g[0] for g in games], typ),
                             "discrete_actions": pa.array([g[1] for g in games], pa.list_(pa.int64())),
                             "rewards": pa.array([[0.0] * len(g[1]) for g in games], pa.list_(pa.float32()))}),
                   root / "atari-breakout" / "train-00000-of-00001.parquet")


def write_atari_head(root: Path, rgb: list[np.ndarray], per_trial: int = 1000) -> None:
    minimal = [FULL_ACTIONS.index(a) for a in minimal_actions("Breakout")]
    rows = ["GameName,trial_id,subject_id,load_trial"]
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / "breakout.zip", "w") as z:
        for trial, start in enumerate(range(0, len(rgb), per_trial), 1):
            stem, utid = f"{trial}_RZ_{1000 + trial}_Aug-10-14-52-42", 1000 + trial
            lines, buf = [",".join(atari_head.HEADER)], io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:bz2") as tar:
                for n, f in enumerate(rgb[start: start + per_trial], 1):
                    png = encode_png(f)
                    info = tarfile.TarInfo(f"{stem}/{utid}_{n}.png")
                    info.size = len(png)
                    tar.addfile(info, io.BytesIO(png))
                    lines.append(f"{utid}_{n},0,{n},50,0,{minimal[n % len(minimal)]},80.5,100.5")
            z.writestr(f"{stem}.tar.bz2", buf.getvalue())
            z.writestr(f"{stem}.txt", "\n".join(lines) + "\n")
            rows.append(f"breakout,{trial},RZ,0")
    (root / "meta_data.csv").write_text("\n".join(rows) + "\n")


def plain_jat(root: Path) -> int:
    n = 0
    for path in sorted(root.glob("atari-*/*.parquet")):
        for row in pq.read_table(path, columns=["image_observations"]).to_pylist():
            for obs in row["image_observations"]:
                decode_png(obs["bytes"])
                n += 1
    return n


def plain_atari_head(root: Path) -> int:
    n = 0
    with zipfile.ZipFile(root / "breakout.zip") as z:
        for name in z.namelist():
            if name.endswith(".tar.bz2"):
                with tarfile.open(fileobj=io.BytesIO(z.read(name)), mode="r:bz2") as tar:
                    for m in tar:
                        if m.isfile():
                            decode_png(tar.extractfile(m).read())
                            n += 1
    return n


def timed(fn, *args, **kwargs) -> float:
    os.sync()  # the last run's files are on disk first, so no run pays for another's writeback
    t = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t


def file_floor(written: Path, fresh: Path) -> float:
    """Seconds to create again every file the import wrote, the way the writer does."""
    files = [(fresh / p.relative_to(written), p.read_bytes()) for p in sorted(written.rglob("*")) if p.is_file()]
    for folder in sorted({f.parent for f, _ in files}):
        folder.mkdir(parents=True, exist_ok=True)
    os.sync()
    t = time.perf_counter()
    with ThreadPoolExecutor(FILE_WRITERS) as pool:
        list(pool.map(lambda pf: pf[0].write_bytes(pf[1]), files))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=4000)
    args = ap.parse_args()
    rgb = screens(args.frames)
    caps = {"train": 10 ** 9, "val": 10 ** 9}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_jat(tmp / "jat", rgb)
        write_atari_head(tmp / "ah", rgb)
        runs = iter(range(10 ** 6))  # a fresh output folder every time: nothing to replace
        for name, plain, module, src in (("jat", plain_jat, jat, tmp / "jat"),
                                         ("atari_head", plain_atari_head, atari_head, tmp / "ah")):
            base, ours, floors = min(timed(plain, src) for _ in range(3)), [], []
            for _ in range(3):
                out = tmp / f"out{next(runs)}"
                ours.append(timed(module.import_game, src, out, "Breakout", caps=caps))
                floors.append(file_floor(out, tmp / f"out{next(runs)}"))
            rows.append((name, args.frames / base, args.frames / min(ours), min(floors), max(floors),
                         args.frames / min(o - f for o, f in zip(ours, floors, strict=True))))
    print(f"{args.frames} Breakout frames per source, best of 3")
    print("| importer | plain decode frames/s | import frames/s | ratio | file floor s (min-max) | "
          "without files | goal |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, base, ours, lo, hi, net in rows:
        print(f"| {name} | {base:,.0f} | {ours:,.0f} | {ours / base:.2f}x | {lo:.2f}-{hi:.2f} | {net / base:.2f}x "
              "| >= 0.5x |")


if __name__ == "__main__":
    main()
