"""Our PNG decoder and encoder against the libraries a user would pick instead, on the same frames.

Real screens of Pong, Breakout, Boxing and Freeway, three ways:

- decode our unfiltered frames (what generate writes, ISA-L level 1, and pack, libdeflate 9);
- decode Pillow-written frames (adaptive row filters, as JAT and most datasets store them);
- encode fast (generate's default against each peer's level 1) and at the level pack uses (9),
  bytes per frame beside the time.

Peers: Pillow (``Image.open`` + ``np.asarray``), OpenCV (``cv2.imdecode`` / ``cv2.imencode``, BGR
order left as it is: converting would only add to its time) and pyspng when it is installed. Each
is timed in the same run, the best of --repeats rounds that time every side once (``_timing.in_rounds``:
alternating order, after an untimed call of each). atari-data keeps its own code only where it is ahead.

    uv run python tools/bench/png.py [--frames 200] [--repeats 3]
    uv run python tools/bench/png.py --smoke        # 16 frames, once (the tests run it)
"""

from __future__ import annotations

import argparse
import io

import numpy as np
from _timing import in_rounds
from PIL import Image

from atari_data.layout.png import decode_png, encode_png
from atari_data.play.ale import AtariGame, play_episode

GAMES = ("Pong", "Breakout", "Boxing", "Freeway")


def screens(n: int) -> list[np.ndarray]:
    out = []
    for game in GAMES:
        g = AtariGame(game)
        moves = np.random.default_rng(0).integers(len(g.actions), size=n)
        steps = play_episode(g, 1, lambda d, moves=moves: int(moves[d.step]), n // len(GAMES))
        out += [d.frame.copy() for d, _ in steps]
    return out


def pillow_png(frame: np.ndarray, level: int = 6) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="PNG", compress_level=level)
    return buf.getvalue()


def timed(sides: dict, repeats: int) -> dict:
    """Best microseconds per item of each side, ``{name: (fn, items)}``, timed in rounds."""
    seconds, _ = in_rounds(
        {k: lambda fn=fn, items=items: [fn(x) for x in items] for k, (fn, items) in sides.items()}, repeats
    )
    return {k: min(seconds[k]) / len(items) * 1e6 for k, (_, items) in sides.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="16 frames, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.frames, args.repeats = 16, 1
    import cv2

    cv2.setNumThreads(1)  # one core each, as ours
    try:
        import pyspng
    except ImportError:
        pyspng = None
    frames = screens(args.frames)
    ours_fast = [encode_png(f) for f in frames]
    ours9 = [encode_png(f, 9) for f in frames]
    filtered = [pillow_png(f) for f in frames]
    for data, f in zip(ours_fast + ours9 + filtered, frames * 3, strict=True):  # every decoder reads them right
        assert np.array_equal(decode_png(data), f) and np.array_equal(np.asarray(Image.open(io.BytesIO(data))), f)

    decoders = {
        "atari-data decode_png": decode_png,
        "Pillow": lambda d: np.asarray(Image.open(io.BytesIO(d))),
        "OpenCV imdecode": lambda d: cv2.imdecode(np.frombuffer(d, np.uint8), cv2.IMREAD_UNCHANGED),
    }
    if pyspng is not None:
        decoders["pyspng"] = pyspng.load

    def encoders(level: int | None) -> dict:  # None: our default, the peers at their fastest level
        peer = level or 1
        return {
            "atari-data encode_png": lambda f: encode_png(f, level),
            "Pillow": lambda f: pillow_png(f, peer),
            "OpenCV imencode": lambda f: cv2.imencode(".png", f, [cv2.IMWRITE_PNG_COMPRESSION, peer])[1].tobytes(),
        }

    print(
        f"{len(frames)} screens of {', '.join(GAMES)}, best of {args.repeats} rounds, each side once a round; pyspng: "
        f"{'installed' if pyspng else 'not installed'}"
    )
    print("| decode | ours, generated (µs) | ours, packed at 9 (µs) | Pillow-filtered (µs) |")
    print("| --- | ---: | ---: | ---: |")
    batches = (ours_fast, ours9, filtered)
    us = timed({(name, i): (fn, b) for name, fn in decoders.items() for i, b in enumerate(batches)}, args.repeats)
    rows = {name: [us[name, i] for i in range(len(batches))] for name in decoders}
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{t:,.0f}" for t in row) + " |")
    ours = rows.pop("atari-data decode_png")
    best_peer = [min(v[i] for v in rows.values()) for i in range(3)]
    print(
        "ours against the fastest peer (above 1: ours is faster): "
        + ", ".join(
            f"{kind} {best_peer[i] / ours[i]:.2f}x" for i, kind in enumerate(("generated", "packed", "filtered"))
        )
    )
    for level, title in ((None, "encode fast (ours: generate's default; peers: level 1)"), (9, "encode at level 9")):
        print(f"\n| {title} | µs per frame | bytes per frame |\n| --- | ---: | ---: |")
        us = timed({name: (fn, frames) for name, fn in encoders(level).items()}, args.repeats)
        for name, fn in encoders(level).items():
            size = np.mean([len(fn(f)) for f in frames])
            print(f"| {name} | {us[name]:,.0f} | {size:,.0f} |")


if __name__ == "__main__":
    main()
