"""How fast is `atari-data validate`, against the raw work it cannot avoid?

Schema checks (no --images) are compared with plain `json.loads` of the same lines; frame checks
(--images) with plain PNG decoding of the same files (Pillow), and with its floor: reading each
file and inflating its image data once, which a whole-file check cannot skip. All are measured in the same run, each
the best of --repeats rounds that time every side once (``_timing.in_rounds``: alternating order, after an untimed
call of each), so the ratios hold on a noisy shared machine.

    uv run python tools/bench/validate.py [--root DIR] [--records 4000] [--repeats 3]
    uv run python tools/bench/validate.py --smoke     # 200 records, once: checks the bench runs

Goals: schema validation >= 0.5x raw JSON parsing (`json.loads`); image checks >= 0.8x raw PNG
decode. validate parses with orjson, so a row against orjson.loads shows the checks' own cost.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import orjson
from _timing import in_rounds
from PIL import Image

from atari_data.layout import list_games
from atari_data.layout.png import inflate
from atari_data.layout.validate import validate
from atari_data.produce.generate import GenerateConfig, generate_game


def build(root: Path, records: int) -> None:
    for game in ("Pong", "Breakout"):
        cfg = GenerateConfig(
            root=str(root),
            source="expert2f",
            train_frames=records // 2,
            val_frames=max(1, records // 20),
            min_train_episodes=1,
            decision_cap=2000,
            baseline_episodes=0,
        )
        generate_game(cfg, game)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", help="an existing layout to measure (default: generate one)")
    ap.add_argument(
        "--records",
        type=int,
        default=4000,
        help="train records to generate when no --root (half a game, 10%% more val)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="200 records, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.records, args.repeats = 200, 1

    tmp = None
    root = Path(args.root) if args.root else None
    if root is None:
        tmp = tempfile.TemporaryDirectory()
        root = Path(tmp.name)
        build(root, args.records)

    games = list_games(root)
    files = [g.split_file(s) for g in games for s in ("train", "val")]
    lines = [line for f in files for line in f.read_bytes().splitlines()]
    frames = []
    for g in games:
        for s in ("train", "val"):
            for rec in g.records(s):
                frames += [g.path / rec[k] for k in ("image", "prev_image") if k in rec]
    n = len(lines)

    def raw_json():
        for line in lines:
            json.loads(line)

    def raw_orjson():
        for line in lines:
            orjson.loads(line)

    def raw_png():
        for p in frames:
            with Image.open(p) as im:
                im.load()

    def raw_inflate():  # the floor of a whole-file check: reading each file and inflating its image data
        for p in frames:
            data = p.read_bytes()
            inflate(data[data.index(b"IDAT") + 4 :], 1 << 17)  # what validate inflates with (libdeflate)

    def check(images):
        def run():
            report = validate(root, images=images)
            assert report.ok, report.defects[:3]

        return run

    sides = {"json": raw_json, "schema": check(False), "orjson": raw_orjson}
    sides |= {"png": raw_png, "images": check(True), "inflate": raw_inflate}
    seconds, _ = in_rounds(sides, args.repeats)
    t_json, t_schema, t_orjson, t_png, t_images, t_inflate = (min(seconds[k]) for k in sides)

    rows = [
        ("validate (schema)", n / t_schema, "json.loads", n / t_json, t_json / t_schema, 0.5),
        ("validate (schema)", n / t_schema, "orjson.loads", n / t_orjson, t_orjson / t_schema, "(its parser)"),
        ("validate --images", n / t_images, "PNG decode", n / t_png, t_png / t_images, 0.8),
        ("validate --images", n / t_images, "read + inflate", n / t_inflate, t_inflate / t_images, "(its floor)"),
    ]
    print(f"{n} records, {len(frames)} frames, {len(games)} games, best of {args.repeats} rounds")
    print("| what | records/s | reference | records/s | ratio | goal |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for what, rate, ref, ref_rate, ratio, goal in rows:
        goal = goal if isinstance(goal, str) else f">= {goal}x"
        print(f"| {what} | {rate:,.0f} | {ref} | {ref_rate:,.0f} | {ratio:.2f}x | {goal} |")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
