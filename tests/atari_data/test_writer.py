import json

import numpy as np
import pytest

from atari_data.errors import AtariDataError
from atari_data.layout import READY, GameDir, list_games
from atari_data.layout.validate import validate
from atari_data.layout.writer import GameWriter, Step, assign_splits
from atari_data.produce.generate import generate_game

from .conftest import small_config

FMT = "gray_8x8"


def synthetic(episode: int, n: int, fire_at=()):
    """Frames whose pixels encode (episode, step), so tests can tell frames apart after decoding."""
    for t in range(n):
        frame = np.full((8, 8), t % 256, np.uint8)
        frame[0, 0] = episode % 256
        frame[0, 1] = t // 256
        yield Step(frame, label=t % 4, target=[0.25] * 4, after_fire=t in fire_at)


def writer(root, **kw):
    base = dict(
        root=root, source="synth", game="Breakout", frame_format=FMT, origin="test", license="CC0-1.0", frames=2
    )
    base.update(kw)
    return GameWriter(**base)


def test_caps_and_even_subsampling_across_episodes(tmp_path):
    w = writer(tmp_path, caps={"train": 100, "val": 10})
    lengths = {2000: 300, 2001: 50, 2002: 1000, 2003: 7}
    for ep, n in lengths.items():
        w.add_episode(ep, "train", synthetic(ep, n))
    w.add_episode(1000, "val", synthetic(1000, 40))
    meta = w.finish()
    g = GameDir(tmp_path, "synth", "Breakout")
    recs = list(g.records("train"))
    assert meta["train"]["records"] == len(recs) == 100
    per_ep = {ep: [r["step"] for r in recs if r["episode"] == ep] for ep in lengths}
    assert all(per_ep.values()), "every episode contributes"
    # Not the first N: the long episode is covered end to end, evenly.
    long = per_ep[2002]
    assert max(long) > 800 and min(long) < 100
    gaps = np.diff(long)
    assert gaps.max() <= 3 * np.median(gaps)
    assert meta["val"]["records"] == 10


def test_progress_advances_one_per_episode(tmp_path):
    class Bar:
        n = 0

        def update(self, n):
            self.n += n

    bar = Bar()
    w = writer(tmp_path, progress=bar)
    for ep, n in ((2000, 5), (2001, 0), (1000, 3)):
        w.add_episode(ep, "val" if ep < 2000 else "train", synthetic(ep, n))
    assert bar.n == 3


def test_two_frame_rule(tmp_path):
    w = writer(tmp_path, caps={"train": 1000, "val": 10})
    w.add_episode(2000, "train", synthetic(2000, 30, fire_at=(10,)))
    w.finish()
    g = GameDir(tmp_path, "synth", "Breakout")
    for rec in g.records("train"):
        cur, prev = g.frame(rec), g.frame(rec, prev=True)
        if rec["step"] in (0, 10):
            assert np.array_equal(prev, cur), "a copy on the first step and after auto-FIRE"
        else:
            assert prev[1, 1] == rec["step"] - 1, "otherwise the previous decision's frame"


def test_two_frame_rule_holds_when_the_previous_step_was_not_kept(tmp_path):
    w = writer(tmp_path, caps={"train": 8, "val": 10})
    w.add_episode(2000, "train", synthetic(2000, 100))
    w.finish()
    g = GameDir(tmp_path, "synth", "Breakout")
    recs = list(g.records("train"))
    assert len(recs) == 8
    for rec in recs[1:]:
        assert g.frame(rec, prev=True)[1, 1] == rec["step"] - 1


def test_meta_is_computed_from_what_was_written(tmp_path):
    w = writer(tmp_path, caps={"train": 1000, "val": 1000}, seed=7)
    w.add_episode(2000, "train", synthetic(2000, 9))
    w.add_episode(1000, "val", synthetic(1000, 5))
    w.drop("not_in_minimal_set", 3)
    meta = w.finish()
    on_disk = json.loads((tmp_path / "synth/Breakout/meta.json").read_text())
    assert on_disk == meta
    assert meta["train"] == {"records": 9, "episodes": 1, "labels": {"NOOP": 3, "FIRE": 2, "RIGHT": 2, "LEFT": 2}}
    assert meta["val"]["records"] == 5 and meta["dropped"] == {"not_in_minimal_set": 3}
    assert meta["actions"] == ["NOOP", "FIRE", "RIGHT", "LEFT"] and meta["seed"] == 7
    assert validate(tmp_path, images=True).ok


def test_complete_game_is_left_alone_and_force_rewrites(tmp_path):
    w = writer(tmp_path)
    w.add_episode(2000, "train", synthetic(2000, 5))
    w.finish()
    assert writer(tmp_path).complete
    assert not writer(tmp_path, force=True).complete


def test_a_game_written_with_other_settings_is_refused_not_kept(tmp_path):
    """A rerun that asks for other records than the folder holds is one line, never the old game kept
    as if it were the one asked for: the folder's meta.json names what it was written with."""
    w = writer(tmp_path, caps={"train": 1000, "val": 10}, seed=7)
    w.add_episode(2000, "train", synthetic(2000, 5))
    w.finish()
    with writer(tmp_path, caps={"train": 1000, "val": 10}, seed=7) as same:
        assert same.complete
    changed = {
        "caps.train": dict(caps={"train": 50, "val": 10}, seed=7),  # a dict's part is named
        "seed": dict(caps={"train": 1000, "val": 10}, seed=8),
        "origin": dict(caps={"train": 1000, "val": 10}, seed=7, origin="another expert"),
        "frames": dict(caps={"train": 1000, "val": 10}, seed=7, frames=1),
    }
    for field, kw in changed.items():
        with writer(tmp_path, **kw) as other, pytest.raises(AtariDataError) as e:
            assert other.complete, "refused, not kept"
        said = str(e.value)
        assert said.startswith(f"synth/Breakout/meta.json: {field}: written with "), said
        assert "--force" in said and "\n" not in said, said
        with writer(tmp_path, force=True, **kw) as forced:
            assert not forced.complete


def test_incomplete_game_is_redone_cleanly(tmp_path):
    # A crash after the folder moved into place but before _READY: a stale, unmarked folder.
    w = writer(tmp_path)
    w.add_episode(2000, "train", synthetic(2000, 5))
    w.finish()
    game = tmp_path / "synth/Breakout"
    (game / READY).unlink()
    (game / "train.jsonl").write_text("half a line")
    (game / "images" / "stale.png").write_bytes(b"junk")
    assert list_games(tmp_path) == [], "not ready, so readers ignore it"
    w = writer(tmp_path)
    assert not w.complete
    w.add_episode(2000, "train", synthetic(2000, 5))
    w.finish()
    assert not (game / "images" / "stale.png").exists()
    assert validate(tmp_path, images=True).ok
    assert len(list(GameDir(tmp_path, "synth", "Breakout").records("train"))) == 5


def test_a_crash_while_writing_leaves_no_ready_game(tmp_path, monkeypatch):
    import atari_data.layout.writer as wmod

    w = writer(tmp_path)
    w.add_episode(2000, "train", synthetic(2000, 5))
    calls = []

    def failing(path, text, sync=False):
        calls.append(path)
        raise OSError("disk full")

    monkeypatch.setattr(wmod, "write_file", failing)
    with pytest.raises(OSError):
        w.finish()
    assert calls and not (tmp_path / "synth/Breakout").exists()
    assert list_games(tmp_path, ready_only=False) == []


def test_wrong_frame_shape_and_duplicate_episode_are_clear_errors(tmp_path):
    with writer(tmp_path) as w, pytest.raises(AtariDataError, match=r"expected uint8 \(8, 8\)"):
        w.add_episode(2000, "train", [Step(np.zeros((9, 8), np.uint8), 0)])
    w = writer(tmp_path)
    w.add_episode(2000, "train", synthetic(2000, 2))
    with pytest.raises(AtariDataError, match="already added"):
        w.add_episode(2000, "val", synthetic(2000, 2))


def test_bad_records_are_refused_at_write_time(tmp_path):
    w = writer(tmp_path)
    w.add_episode(2000, "train", [Step(np.zeros((8, 8), np.uint8), label=7)])
    with pytest.raises(AtariDataError, match="label: 7 is out of range"):
        w.finish()
    assert not (tmp_path / "synth/Breakout").exists()


def test_a_record_json_cannot_hold_is_refused_on_one_line(tmp_path):
    """A source's provenance with a key that is not text (JSON object keys are strings): Python's json
    wrote it as "1", orjson refuses it; either way the record is not what the source gave."""
    w = writer(tmp_path)
    w.add_episode(2000, "train", [Step(np.zeros((8, 8), np.uint8), 0, provenance={"gaze": {1: 0.5}})])
    with pytest.raises(AtariDataError, match=r"train\.jsonl: provenance\.gaze: key 1 is not text"):
        w.finish()
    assert not (tmp_path / "synth/Breakout").exists()


def test_assign_splits():
    s = assign_splits(range(40))
    assert sum(v == "val" for v in s.values()) == 2
    assert assign_splits([5]) == {5: "train"}
    two = assign_splits([1, 2])
    assert sorted(two.values()) == ["train", "val"]
    assert assign_splits(range(40)) == s


def test_generation_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        generate_game(small_config(root, min_train_episodes=1), "Pong")
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) > 10
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_generated_frames_are_real_ale_screens(layout_master):
    g = GameDir(layout_master, "expert2f", "Breakout")
    rec = next(g.records("train"))
    frame = g.frame(rec)
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 3, "a real screen has several colours"
    meta = g.meta()
    assert meta["protocol"]["env_id"] == "ALE/Breakout-v5"
    assert meta["protocol"]["repeat_action_probability"] == 0.25


@pytest.mark.parametrize("shape", [(210, 160, 3), (84, 84), (1, 1, 3), (7, 5)])
def test_png_encoder_round_trips_through_pillow(shape):
    import io

    from PIL import Image

    from atari_data.layout.png import encode_png

    a = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    a[: len(a) // 2] = 7  # half flat, as screens are: the levels differ in how well they pack it
    sizes = {}
    for level in (None, 1, 9, 12):  # generation's ISA-L default, and pack's libdeflate levels
        data = encode_png(a, level)
        with Image.open(io.BytesIO(data)) as im:
            assert im.mode == ("RGB" if len(shape) == 3 else "L")
            assert np.array_equal(np.asarray(im), a)
        assert encode_png(a, level) == data
        sizes[level] = len(data)
    if a.size >= 84 * 84:  # a few pixels pack to a few bytes whatever the level
        assert sizes[9] <= sizes[None] and sizes[12] <= sizes[1]
    with pytest.raises(ValueError):
        encode_png(a.astype(np.float32))
    with pytest.raises(ValueError, match="libdeflate level 1-12"):
        encode_png(a, 13)


@pytest.mark.parametrize("shape", [(210, 160, 3), (84, 84), (3, 2, 3), (84, 84, 4)])
def test_png_decoder_reads_our_frames_and_falls_back_to_pillow(shape):
    import io

    from PIL import Image

    from atari_data.layout.png import decode_png, encode_png

    a = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    if a.ndim < 3 or a.shape[2] == 3:  # the encoder writes grey and RGB only
        assert np.array_equal(decode_png(encode_png(a)), a)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG", compress_level=9)  # Pillow filters rows: the fallback path
    assert np.array_equal(decode_png(buf.getvalue()), a)
    pal = io.BytesIO()
    Image.fromarray(a if a.ndim == 2 else a[..., 0]).convert("P").save(pal, format="PNG")
    colours = np.asarray(Image.open(io.BytesIO(pal.getvalue())).convert("RGB"))
    assert np.array_equal(decode_png(pal.getvalue()), colours), "a palette frame is its colours, not its indices"


def _chunk(kind: bytes, data: bytes) -> bytes:
    import struct
    import zlib

    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(rows: bytes, w: int, h: int, interlace: int = 0, stream: bytes | None = None) -> bytes:
    """An 8-bit grey PNG of the given filtered row bytes (filter byte first on each row)."""
    import struct
    import zlib

    from atari_data.layout.png import SIGNATURE

    return (
        SIGNATURE
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, interlace))
        + _chunk(b"IDAT", zlib.compress(rows) if stream is None else stream)
        + _chunk(b"IEND", b"")
    )


def test_png_decoder_unfilters_rows_after_an_unfiltered_first_row():
    from atari_data.layout.png import decode_png

    # Row 0 unfiltered [10, 20, 30]; row 1 Sub-filtered deltas [5, 1, 1] -> [5, 6, 7];
    # row 2 Up-filtered [1, 1, 1] -> [6, 7, 8].
    png = _png(bytes([0, 10, 20, 30, 1, 5, 1, 1, 2, 1, 1, 1]), 3, 3)
    assert decode_png(png).tolist() == [[10, 20, 30], [5, 6, 7], [6, 7, 8]]


@pytest.mark.parametrize("rows", [bytes([0, 1, 2]), bytes([1, 1, 2])], ids=["unfiltered", "filtered"])
def test_png_decoder_refuses_a_short_image(rows):
    from atari_data.layout.png import decode_png

    with pytest.raises(ValueError):
        decode_png(_png(rows, 3, 3))  # one row of three


def test_png_size_accepts_whole_pngs_and_refuses_damaged_ones():
    import io
    import zlib

    from PIL import Image

    from atari_data.layout.png import encode_png, png_size

    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (21, 16, 3), dtype=np.uint8)
    good = [encode_png(rgb)]
    for im in (
        Image.fromarray(rgb),
        Image.fromarray(rgb[..., 0]),
        Image.fromarray(rgb).convert("P"),
        Image.fromarray(rgb[..., 0]).convert("1"),
        Image.fromarray(rgb[..., :2], "LA"),
    ):
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        good.append(buf.getvalue())
    # A 3x3 Adam7 image: passes 1, 4, 5, 6, 7 hold 1, 1, 2, 2 and 3 pixels in 1, 1, 1, 2 and 1 rows.
    interlaced = _png(bytes(15), 3, 3, interlace=1)
    assert np.asarray(Image.open(io.BytesIO(interlaced))).shape == (3, 3), "Pillow reads it: the size is right"
    for data in good:
        assert png_size(data) == (16, 21)
    assert png_size(interlaced) == (3, 3)

    png = good[1]  # Pillow's RGB
    body = 8 + 25 + 8  # signature, IHDR chunk, then the IDAT's length and type
    flipped = png[: body + 5] + bytes([png[body + 5] ^ 1]) + png[body + 6 :]
    rows, z = bytes(3 * (1 + 3)), zlib.compressobj()
    damaged = {
        "cut short": png[:-30],
        "no IEND": png[:-12],
        "bit flipped (CRC)": flipped,
        "not a PNG": b"GIF89a" + png[6:],
        "stream broken, CRC right": _png(rows, 3, 3, stream=b"\x78\x9c\xff\xff\xff"),
        "too few rows": _png(rows[:8], 3, 3),
        "too many rows": _png(rows + rows[:4], 3, 3),
        "stream not finished": _png(rows, 3, 3, stream=z.compress(rows) + z.flush(zlib.Z_SYNC_FLUSH)),
    }
    assert png_size(_png(rows, 3, 3)) == (3, 3)
    for what, data in damaged.items():
        assert png_size(data) is None, what


def test_a_second_writer_of_the_same_game_is_refused_until_the_first_is_done(tmp_path):
    first = writer(tmp_path)
    with pytest.raises(AtariDataError, match=r"\.Breakout\.lock: \(lock\): another process \(pid \d+\) is writing"):
        writer(tmp_path)
    with writer(tmp_path, game="Pong"):  # other games are free
        pass
    first.add_episode(2000, "train", synthetic(2000, 3))
    first.finish()
    assert not (tmp_path / "synth" / ".Breakout.lock").exists(), "the lock leaves no trace"
    with writer(tmp_path) as again:
        assert again.complete


def test_a_lock_held_by_a_killed_process_is_free(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys, time; from atari_data.layout import GameLock; "
        "l = GameLock(sys.argv[1], 'synth', 'Breakout'); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AtariDataError, match=f"pid {holder.pid}"):
            writer(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "synth" / ".Breakout.lock").exists(), "a killed holder leaves its file..."
    with writer(tmp_path) as w:  # ...but not its lock
        assert not w.complete


def test_a_split_a_layout_does_not_have_is_named_with_those_it_has(layout_master):
    """From a researcher's review: records("validation"), the Hub's name, said val's file was missing."""
    game = list_games(layout_master, ["expert2f"])[0]
    with pytest.raises(AtariDataError, match=r"'validation' is not a split of a layout \(train, val; the Hub names"):
        next(game.records("validation"))
    assert next(game.records("val"))["id"]
