"""How fast do packed datasets decode, against plain PNG decoding of the same frames?

(a) the WebDataset helper (`atari_data.publish.shards.records`), (b) `load_dataset(..., streaming=True)`
on the Parquet config, each turning every sample's frames into uint8 arrays, against decoding the
same PNG files straight from the layout with Pillow, in one run. The helper decodes our unfiltered
PNGs without Pillow (`atari_data.layout.png.decode_png`, libdeflate); a row shows that decoder on the raw files too.
Also the packed bytes per record against the layout's (files' sizes, not disk blocks; a frame file
that two records share counts once), and what re-compressing the frames costs `pack`: the same
pack timed with and without it. Reads are the best of --repeats rounds that time every reader once
(``_timing.in_rounds``: alternating order, after an untimed pass of each; until 2026-12-06 each
reader's repeats ran together, in a fixed order).

    uv run python tools/bench/load.py [--root DIR] [--records 4000]
    uv run python tools/bench/load.py --smoke     # a few hundred records, one repeat (the tests run it)

Goals: (a) >= 0.8x and (b) >= 0.5x raw decode; packed Parquet <= 0.15x the layout's bytes per record.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from _timing import in_rounds
from PIL import Image

from atari_data.layout import list_games
from atari_data.layout.png import decode_png
from atari_data.produce.generate import GenerateConfig, generate
from atari_data.publish import repo
from atari_data.publish.pack import PackConfig, pack
from atari_data.publish.shards import records


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="an existing layout (default: generate expert2f for two games)")
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="300 records, one repeat: checks the bench runs")
    args = ap.parse_args(argv)
    if args.smoke:
        args.records, args.repeats = 300, 1
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

        def timed_pack(folder: str, level: int | None) -> float:  # level None: frames copied as they are
            t = time.perf_counter()
            pack(
                PackConfig(
                    root=str(root),
                    out=str(Path(tmp) / folder),
                    sources=["expert2f"],
                    shard_size=64_000_000,
                    png_level=level,
                )
            )
            return time.perf_counter() - t

        level = PackConfig.png_level
        timed_pack("warm-up", None)  # imports and first-use costs out of the comparison
        t_pack, t_copy = timed_pack("repo", level), timed_pack("copied", None)
        games = list_games(root, ["expert2f"])
        files = [g.path / rec[k] for g in games for rec in g.records("train") for k in ("image", "prev_image")]
        n = len(files) // 2
        urls = sorted(str(p) for p in (out / "webdataset" / "expert2f").glob("*/train-*.tar"))
        os.environ["HF_DATASETS_CACHE"] = str(Path(tmp) / "cache")
        from datasets import load_dataset

        def raw():
            for f in files:
                with Image.open(f) as im:
                    np.asarray(im)
            return len(files) // 2

        def raw_ours():
            for f in files:
                decode_png(f.read_bytes())
            return len(files) // 2

        reused = [0]

        def raw_ours_once():  # the helper's rule: a previous frame of the last frame's bytes is not decoded again
            last, reused[0] = None, 0
            for image, prev in zip(files[0::2], files[1::2], strict=True):
                data = prev.read_bytes()
                if data == last:
                    reused[0] += 1
                else:
                    decode_png(data)
                last = image.read_bytes()
                decode_png(last)
            return len(files) // 2

        copied = Path(tmp) / "copied"
        urls_copied = sorted(str(p) for p in (copied / "webdataset" / "expert2f").glob("*/train-*.tar"))

        def helper(shards=urls):
            return sum(1 for _ in records(shards, split=False))

        def plain_webdataset(shards=urls):  # what a user would pick instead of the helper
            import webdataset as wds

            count = 0
            for sample in wds.WebDataset(shards, shardshuffle=False).decode("rgb8"):
                sample["png"], sample[f"{repo.PREV}.png"]
                count += 1
            return count

        def streaming(folder=out):
            count = 0
            for r in load_dataset(str(folder), "expert2f", split="train", streaming=True):
                np.asarray(r["image"]), np.asarray(r["prev_image"])
                count += 1
            return count

        sides = {"raw": raw, "ours": raw_ours, "helper": helper, "streaming": streaming, "once": raw_ours_once}
        sides |= {"plain": plain_webdataset, "helper copied": lambda: helper(urls_copied)}
        sides["streaming copied"] = lambda: streaming(copied)
        seconds, counts = in_rounds(sides, args.repeats)
        short = {what: c for what, c in counts.items() if c != n}
        if short:  # a reader that skipped a shard would read as fast
            raise SystemExit(f"read other than {n} samples: {short}")
        t_raw, t_ours, t_wds, t_stream, t_once, t_plain_wds, t_wds_copied, t_stream_copied = (
            min(seconds[k]) for k in sides
        )
        layout_bytes = sum(f.stat().st_size for f in set(files)) + sum(
            g.split_file("train").stat().st_size for g in games
        )
        packed_pq = sum(p.stat().st_size for p in (out / "data" / "expert2f").glob("*/train-*.parquet"))
        copied_pq = sum(
            p.stat().st_size for p in (Path(tmp) / "copied" / "data" / "expert2f").glob("*/train-*.parquet")
        )
        packed_wds = sum(Path(u).stat().st_size for u in urls)
        packed_records = sum(g.meta()["train"]["records"] + g.meta()["val"]["records"] for g in games)
    print(f"{n} two-frame records (expert2f, Pong and Breakout); reads: best of {args.repeats} rounds")
    # The goals are against raw PNG decoding of both frames, as they were set; the last column is
    # against decoding only what the readers decode (a previous frame equal to the last frame once).
    print(
        "| what | samples/s | ratio to raw PNG decode | ratio to like decoding | goal |\n"
        "| --- | ---: | ---: | ---: | ---: |"
    )
    print(f"| raw PNG decode (2 frames a sample) | {n / t_raw:,.0f} | 1.00x | | |")
    print(f"| raw decode_png (what the helper uses) | {n / t_ours:,.0f} | {t_raw / t_ours:.2f}x | | |")
    print(
        f"| raw decode_png, a previous frame equal to the last frame not again ({reused[0]} of {n}, as the helper) "
        f"| {n / t_once:,.0f} | {t_raw / t_once:.2f}x | 1.00x | |"
    )
    print(
        f"| plain webdataset, .decode('rgb8') (what a user would pick) | {n / t_plain_wds:,.0f} "
        f"| {t_raw / t_plain_wds:.2f}x | | |"
    )
    for what, t, goal in (
        (f"(a) WebDataset helper (frames at libdeflate {level})", t_wds, ">= 0.8x"),
        (f"(b) load_dataset streaming (frames at libdeflate {level})", t_stream, ">= 0.5x"),
        ("(a) WebDataset helper (frames copied, `--png-level keep`)", t_wds_copied, ""),
        ("(b) load_dataset streaming (frames copied)", t_stream_copied, ""),
    ):
        print(f"| {what} | {n / t:,.0f} | {t_raw / t:.2f}x | {t_once / t:.2f}x | {goal} |")
    print("\n| storage (train split) | bytes per record | ratio to layout | goal |\n| --- | ---: | ---: | ---: |")
    for what, b, goal in (
        ("layout (PNG files + JSONL line)", layout_bytes, ""),
        (f"packed Parquet (frames at libdeflate {level})", packed_pq, "<= 0.15x"),
        ("packed Parquet (frames copied)", copied_pq, ""),
        (f"packed WebDataset tar (frames at libdeflate {level})", packed_wds, ""),
    ):
        print(f"| {what} | {b / n:,.0f} | {b / layout_bytes:.2f}x | {goal} |")
    print(
        f"\npack: {1000 * t_pack / packed_records:.2f} ms per record re-compressing, "
        f"{1000 * t_copy / packed_records:.2f} ms copying ({packed_records} records, both splits, validation included)"
    )


if __name__ == "__main__":
    main()
