"""How fast do packed datasets decode, against plain PNG decoding of the same frames?

(a) the WebDataset helper (`atari_data.publish.shards.records`), (b) `load_dataset(..., streaming=True)`
on the Parquet config, each turning every sample's frames into uint8 arrays, against decoding the
same PNG files straight from the layout with Pillow, in one run. The helper decodes our unfiltered
PNGs with zlib alone (`atari_data.layout.png.decode_png`); a row shows that decoder on the raw files too.
Also the packed bytes per record against the layout's (files' sizes, not disk blocks).

    uv run python tools/bench/load.py [--root DIR] [--records 4000]

Goals: (a) >= 0.8x and (b) >= 0.5x raw decode.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from atari_data.layout import list_games
from atari_data.layout.png import decode_png
from atari_data.produce.generate import GenerateConfig, generate
from atari_data.publish.pack import PackConfig, pack
from atari_data.publish.shards import records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="an existing layout (default: generate expert2f for two games)")
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(dir=".", prefix=".bench-load-") as tmp:
        root = Path(args.root) if args.root else Path(tmp) / "layout"
        if not args.root:
            generate(
                GenerateConfig(
                    root=str(root),
                    games=["Pong", "Breakout"],
                    train_frames=args.records // 2,
                    val_frames=50,
                    min_train_episodes=1,
                    baseline_episodes=0,
                    decision_cap=1000,
                    workers=2,
                ),
                progress=False,
            )
        out = Path(tmp) / "repo"
        pack(PackConfig(root=str(root), out=str(out), sources=["expert2f"], shard_size=64_000_000))
        games = list_games(root, ["expert2f"])
        files = [g.path / rec[k] for g in games for rec in g.records("train") for k in ("image", "prev_image")]
        n = len(files) // 2
        urls = sorted(str(p) for p in (out / "webdataset" / "expert2f").glob("train-*.tar"))
        os.environ["HF_DATASETS_CACHE"] = str(Path(tmp) / "cache")
        from datasets import load_dataset

        def raw():
            for f in files:
                with Image.open(f) as im:
                    np.asarray(im)

        def raw_zlib():
            for f in files:
                decode_png(f.read_bytes())

        def helper():
            for _ in records(urls, split=False):
                pass

        def streaming():
            for r in load_dataset(str(out), "expert2f", split="train", streaming=True):
                np.asarray(r["image"]), np.asarray(r["prev_image"])

        def best(fn):
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            return min(times)

        t_raw, t_zlib, t_wds, t_stream = best(raw), best(raw_zlib), best(helper), best(streaming)
        layout_bytes = sum(f.stat().st_size for f in files) + sum(g.split_file("train").stat().st_size for g in games)
        packed_pq = sum(p.stat().st_size for p in (out / "data" / "expert2f").glob("train-*.parquet"))
        packed_wds = sum(Path(u).stat().st_size for u in urls)
    print(f"{n} two-frame records (expert2f, Pong and Breakout), best of {args.repeats}")
    print("| what | samples/s | ratio to raw PNG decode | goal |\n| --- | ---: | ---: | ---: |")
    print(f"| raw PNG decode (2 frames a sample) | {n / t_raw:,.0f} | 1.00x | |")
    print(f"| raw decode_png (zlib only, what the helper uses) | {n / t_zlib:,.0f} | {t_raw / t_zlib:.2f}x | |")
    print(f"| (a) WebDataset helper | {n / t_wds:,.0f} | {t_raw / t_wds:.2f}x | >= 0.8x |")
    print(f"| (b) load_dataset streaming | {n / t_stream:,.0f} | {t_raw / t_stream:.2f}x | >= 0.5x |")
    print("\n| storage | bytes per record | ratio to layout |\n| --- | ---: | ---: |")
    for what, b in (
        ("layout (PNG files + JSONL line)", layout_bytes),
        ("packed Parquet", packed_pq),
        ("packed WebDataset tar", packed_wds),
    ):
        print(f"| {what} | {b / n:,.0f} | {b / layout_bytes:.2f}x |")


if __name__ == "__main__":
    main()
