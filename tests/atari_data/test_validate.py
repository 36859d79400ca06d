"""Every defect the validator promises to catch, each with its one-line message."""

import json
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from atari_data.cli import main
from atari_data.errors import AtariDataError
from atari_data.layout.validate import validate
from atari_data.produce.generate import generate_game

B2 = "expert2f/Breakout"  # two-frame game of the fixture layout
P1 = "expert/Pong"  # one-frame game
LINE = re.compile(r"^\S+?(:\d+)?: [\w.\[\]()]+: .+$")


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def rewrite(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def edit_record(root, game, split="train", i=0, **changes):
    path = root / game / f"{split}.jsonl"
    recs = lines(path)
    for k, v in changes.items():
        if v is DELETE:
            recs[i].pop(k)
        else:
            recs[i][k] = v
    rewrite(path, recs)


def edit_meta(root, game, fn):
    path = root / game / "meta.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


DELETE = object()


def run_cli(root, *args, capsys):
    rc = main(["validate", str(root), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def expect(root, capsys, pattern, *args, file=None):
    rc, out, err = run_cli(root, *args, capsys=capsys)
    assert rc == 2, out + err
    defect_lines = [x for x in out.splitlines() if not x.startswith("...")]
    assert defect_lines and all(LINE.match(x) for x in defect_lines), out
    assert "Traceback" not in out + err
    hits = [x for x in defect_lines if re.search(pattern, x)]
    assert hits, f"{pattern!r} not in:\n{out}"
    if file:
        assert any(file in h for h in hits), hits
    return hits


def test_valid_layout_passes_with_a_summary(layout, capsys):
    rc, out, _ = run_cli(layout, "--images", capsys=capsys)
    assert rc == 0
    assert "Breakout" in out and "Pong" in out and "valid: 2 games" in out


def test_unknown_field(layout, capsys):
    edit_record(layout, B2, i=3, color="red")
    hit = expect(layout, capsys, r"train\.jsonl:4: color: unknown field")
    assert len(hit) == 1


def test_missing_field(layout, capsys):
    edit_record(layout, B2, step=DELETE)
    expect(layout, capsys, r"train\.jsonl:1: step: is missing")


def test_wrong_type(layout, capsys):
    edit_record(layout, P1, episode="2000")
    expect(layout, capsys, r"episode: expected an integer, got string")


def test_id_format_and_consistency(layout, capsys):
    edit_record(layout, B2, id="not-an-id")
    expect(layout, capsys, r"id: 'not-an-id' does not match")
    edit_record(layout, B2, i=1, id="expert2f-Breakout-e002000-s000777")
    expect(layout, capsys, r"train\.jsonl:2: id: .* does not match source, game, episode and step")


def test_duplicate_id(layout, capsys):
    path = layout / B2 / "train.jsonl"
    recs = lines(path)
    rewrite(path, recs + [recs[5]])
    expect(layout, capsys, rf"train\.jsonl:{len(recs) + 1}: id: .* is repeated")


def test_missing_image_file(layout, capsys):
    rec = lines(layout / P1 / "val.jsonl")[2]
    (layout / P1 / rec["image"]).unlink()
    expect(layout, capsys, r"val\.jsonl:3: image: images/.*\.png does not exist")


def test_image_path_leaving_the_folder(layout, capsys):
    edit_record(layout, P1, image="../../../etc/passwd.png")
    expect(layout, capsys, r"image: '\.\./\.\./\.\./etc/passwd\.png' is not images/<id>")


def test_corrupt_and_wrong_sized_frames_with_images(layout, capsys):
    recs = lines(layout / B2 / "train.jsonl")
    (layout / B2 / recs[4]["image"]).write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    Image.fromarray(np.zeros((84, 84), np.uint8)).save(layout / B2 / recs[6]["prev_image"])
    rc, _, _ = run_cli(layout, capsys=capsys)
    assert rc == 0, "without --images frames are only checked to exist"
    expect(layout, capsys, r"train\.jsonl:5: image: .* does not decode", "--images")
    expect(layout, capsys, r"train\.jsonl:7: prev_image: .* is L 84x84, expected RGB 210x160", "--images")


@pytest.mark.parametrize("fmt,options", [("TIFF", {"compression": "tiff_deflate"}), ("JPEG", {})])
def test_a_frame_of_another_format_is_refused_not_decoded_past_the_limit(layout, capsys, monkeypatch, fmt, options):
    """A 2000x2000 deflated TIFF or JPEG named .png is 12 MB of pixels in a few KB of file: Pillow
    decoded it whatever the frame limit said, since only a PNG's header was checked. A frame is
    decoded only as the format its name says."""
    monkeypatch.setenv("ATARI_DATA_LIMITS", "frame=1")
    recs = lines(layout / B2 / "train.jsonl")
    Image.new("RGB", (2000, 2000)).save(layout / B2 / recs[4]["image"], fmt, **options)
    expect(layout, capsys, r"train\.jsonl:5: image: \S+ does not decode \(is not a PNG image\)", "--images")


def test_a_frame_pillow_refuses_is_a_defect_though_its_image_data_is_whole(layout, capsys):
    """A 1-byte gAMA chunk (CRC right): the image data is whole, so the one-inflate check passed it,
    and datasets' Pillow then refused the packed frame ("Truncated gAMA chunk")."""
    import zlib

    recs = lines(layout / B2 / "train.jsonl")
    path = layout / B2 / recs[4]["image"]
    png = path.read_bytes()
    gama = b"\x00\x00\x00\x01gAMA\x01" + zlib.crc32(b"gAMA\x01").to_bytes(4, "big")
    path.write_bytes(png[:33] + gama + png[33:])
    expect(layout, capsys, r"train\.jsonl:5: image: \S+ does not decode \(is a broken PNG image .*gAMA", "--images")


def test_prev_image_missing_in_two_frame_source(layout, capsys):
    edit_record(layout, B2, i=2, prev_image=DELETE)
    expect(layout, capsys, r"train\.jsonl:3: prev_image: is missing")


def test_prev_image_in_one_frame_source(layout, capsys):
    rec = lines(layout / P1 / "train.jsonl")[0]
    edit_record(layout, P1, prev_image=rec["image"].replace(".png", "_prev.png"))
    expect(layout, capsys, r"prev_image: is present in a one-frame source")


def test_prev_image_differs_at_step_zero(layout, capsys):
    rec = next(r for r in lines(layout / B2 / "train.jsonl") if r["step"] == 0)
    other = lines(layout / B2 / "train.jsonl")[10]
    shutil.copy(layout / B2 / other["image"], layout / B2 / rec["prev_image"])
    expect(layout, capsys, r"prev_image: differs from image on the episode's first step")


def test_actions_not_the_minimal_set(layout, capsys):
    edit_meta(layout, B2, lambda m: m.update(actions=["NOOP", "FIRE", "LEFT", "RIGHT"]))
    expect(layout, capsys, r"meta\.json: actions: .* differ from the ALE minimal set")
    edit_record(layout, P1, actions=["NOOP", "FIRE"])
    expect(layout, capsys, r"train\.jsonl:1: actions: .* differ from the game's action set")


def test_label_out_of_range(layout, capsys):
    edit_record(layout, B2, i=7, label=4)
    expect(layout, capsys, r"train\.jsonl:8: label: 4 is out of range \(expected 0\.\.3\)")


@pytest.mark.parametrize(
    "target,message",
    [
        ([0.5, 0.5], r"has 2 values, expected 4"),
        ([1.2, -0.2, 0.0, 0.0], r"negative probability"),
        ([0.3, 0.3, 0.3, 0.3], r"sums to 1\.2, expected 1"),
        ([float("nan"), 0.5, 0.25, 0.25], r"train\.jsonl:1: \(record\): is not valid JSON"),  # NaN is not JSON
        ([1e309, 0.5, 0.25, 0.25], r"train\.jsonl:1: \(record\): is not valid JSON"),
        (["0.25", 0.25, 0.25, 0.25], r"target\[0\]: expected a number"),
    ],
)
def test_bad_target(layout, capsys, target, message):
    edit_record(layout, B2, target=target)
    expect(layout, capsys, message)


def test_good_target_is_accepted(layout, capsys):
    edit_record(layout, B2, target=[0.1, 0.2, 0.3, 0.40005])
    assert run_cli(layout, capsys=capsys)[0] == 0


def test_question_differs(layout, capsys):
    rec = lines(layout / P1 / "train.jsonl")[0]
    q = dict(rec["question"], instructions="Play well.")
    edit_record(layout, P1, question=q)
    expect(layout, capsys, r"question: differs from game_question")


def test_source_and_game_must_match_the_folder(layout, capsys):
    edit_record(layout, P1, source="expert2f")
    expect(layout, capsys, r"source: 'expert2f' does not match the folder")
    edit_meta(layout, B2, lambda m: m.update(game="Pong"))
    expect(layout, capsys, r"meta\.json: game: 'Pong' does not match the folder")


def test_train_and_val_episodes_overlap(layout, capsys):
    val_path = layout / B2 / "val.jsonl"
    recs = lines(val_path)
    train_ep = lines(layout / B2 / "train.jsonl")[0]["episode"]
    r = recs[0]
    new_id = f"expert2f-Breakout-e{train_ep:06d}-s099999"
    for key, suffix in (("image", ".png"), ("prev_image", "_prev.png")):
        (layout / B2 / r[key]).rename(layout / B2 / f"images/{new_id}{suffix}")
        r[key] = f"images/{new_id}{suffix}"
    r.update(id=new_id, episode=train_ep, step=99999)
    rewrite(val_path, recs)
    edit_meta(layout, B2, lambda m: m["val"].update(episodes=m["val"]["episodes"] + 1))
    expect(layout, capsys, rf"val\.jsonl: episode: episodes \[{train_ep}\] are in both train and val")


def _renumber_episode(game_dir, split, new):
    """Give the split's first episode the number ``new`` everywhere it appears (records, ids, frame
    files, episodes.jsonl), so that only the number itself can be wrong."""
    path = game_dir / f"{split}.jsonl"
    recs = lines(path)
    old = recs[0]["episode"]
    for r in recs:
        if r["episode"] == old:
            new_id = r["id"].replace(f"-e{old:06d}-", f"-e{new:06d}-")
            for key in ("image", "prev_image"):
                if key in r:
                    target = r[key].replace(r["id"], new_id)
                    (game_dir / r[key]).rename(game_dir / target)
                    r[key] = target
            r.update(id=new_id, episode=new)
    rewrite(path, recs)
    episodes = lines(game_dir / "episodes.jsonl")
    for e in episodes:
        if e["episode"] == old:
            e["episode"] = new
    rewrite(game_dir / "episodes.jsonl", episodes)


def test_an_episode_past_six_digits_has_a_valid_id(layout, capsys):
    """Ids write the episode as ``:06d``, at least six digits. The id pattern took exactly six, so a
    record of episode 1,234,567 passed the fast check but, once anything else about it was wrong,
    was also told its id did not match."""
    _renumber_episode(layout / B2, "val", 1_234_567)
    rc, out, err = run_cli(layout, capsys=capsys)
    assert rc == 0, out + err
    edit_record(layout, B2, split="val", i=0, color="red")  # a defect the structural check finds
    expect(layout, capsys, r"val\.jsonl:1: color: unknown field")
    rc, out, _ = run_cli(layout, capsys=capsys)
    assert not [x for x in out.splitlines() if ": id: " in x], out


@pytest.mark.parametrize("episode", [2**63, 2**64])
def test_an_integer_past_64_bits_is_refused_before_parquet_overflows(layout, capsys, tmp_path, episode):
    """The schema's integers are int64, as Parquet stores them. An episode numbered 2**63 in every
    place it appears passed validate and then crashed pack with OverflowError; one numbered 2**64
    was refused as "expected an integer, got number" (orjson reads it as a float)."""
    _renumber_episode(layout / B2, "val", episode)
    expect(layout, capsys, r"val\.jsonl:1: episode: \S+ is past the 64-bit integer range")
    rc = main(["pack", str(layout), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "64-bit" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("depth", [64, 65, 1000])
def test_provenance_nested_past_64_levels_is_one_defect_not_a_recursion_error(layout, capsys, tmp_path, depth):
    """orjson and the standard library read JSON nested about 1,000 deep; checking it recursed, so
    validate and pack crashed with RecursionError. The schema takes 64 levels, far past any real
    provenance, and says so."""
    path = layout / B2 / "train.jsonl"
    first, rest = path.read_bytes().split(b"\n", 1)
    rec = json.loads(first)
    rec["provenance"] = {"note": "X"}
    path.write_bytes(json.dumps(rec).replace('"X"', "[" * depth + "]" * depth).encode() + b"\n" + rest)
    if depth <= 64:
        assert run_cli(layout, capsys=capsys)[0] == 0
        return
    expect(layout, capsys, r"train\.jsonl:1: provenance\.note: nests deeper than 64 levels")
    rc = main(["pack", str(layout), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "nests deeper than 64 levels" in err and not (tmp_path / "out").exists()


def test_written_records_are_the_lines_validate_reads_once(tmp_path):
    """validate parses a line a second time, keeping repeated keys, unless writing the parsed record
    back gives the line (so no key was given twice): at 1 us against 60 for the second parse. An
    18-action game's targets hold probabilities such as 9e-06, which Python's json writes where
    orjson writes 9e-6, so each of its lines took the slow path: Boxing validated at about a quarter
    of Pong's rate. The writer and validate share one form of a line."""
    import orjson

    from atari_data.layout.records import record_line

    from .conftest import small_config

    generate_game(small_config(tmp_path, train_frames=60, val_frames=10, baseline_episodes=0), "Boxing")
    lines = [
        ln
        for s in ("train", "val")
        for ln in (tmp_path / "expert2f/Boxing" / f"{s}.jsonl").read_bytes().split(b"\n")
        if ln
    ]
    targets = [t for ln in lines for t in orjson.loads(ln)["target"]]
    assert any(0 < t < 1e-4 for t in targets), "no probability small enough to be written with an exponent"
    assert all(record_line(orjson.loads(ln)) == ln for ln in lines)
    assert all(orjson.dumps(orjson.loads(ln)) == ln for ln in lines)  # what validate's quick check asks


@pytest.mark.parametrize("where", ["record", "question"])
def test_a_key_given_twice_is_a_defect(layout, capsys, where):
    """JSON readers disagree on a repeated key (orjson and the standard library keep the last, others
    the first or refuse), so a record holding one means different data to different readers."""
    path = layout / B2 / "train.jsonl"
    first, rest = path.read_bytes().split(b"\n", 1)
    if where == "record":  # a label no reader should see, then the record's own
        first = first.replace(b'"label":', b'"label":99,"label":', 1)
    else:
        first = first.replace(b'"criteria":', b'"type":"choice","criteria":', 1)
    path.write_bytes(first + b"\n" + rest)
    field = "label" if where == "record" else r"question\.type"
    expect(layout, capsys, rf"train\.jsonl:1: {field}: is given twice \(JSON readers disagree")


def test_caps_respected(layout, capsys):
    edit_meta(layout, P1, lambda m: m["caps"].update(train=10))
    expect(layout, capsys, r"train\.jsonl: \(records\): \d+ records exceed the cap 10")


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("records", 3, r"train\.records: says 3, the records have"),
        ("episodes", 9, r"train\.episodes: says 9, the records have"),
        ("labels", {"NOOP": 1}, r"train\.labels: .* differ from the records'"),
    ],
)
def test_meta_counts_must_match_the_records(layout, capsys, key, value, message):
    edit_meta(layout, B2, lambda m: m["train"].update({key: value}))
    expect(layout, capsys, message)


def test_meta_structure(layout, capsys):
    edit_meta(layout, B2, lambda m: m.update(schema_version=99, shiny=True))
    expect(layout, capsys, r"meta\.json: schema_version: 99 is not one of 1")
    expect(layout, capsys, r"meta\.json: shiny: unknown field")
    (layout / P1 / "meta.json").write_text("{not json")
    expect(layout, capsys, r"Pong/meta\.json: \(file\): is not valid JSON")


def test_invalid_json_line(layout, capsys):
    path = layout / P1 / "val.jsonl"
    path.write_text(path.read_text() + "{oops\n")
    expect(layout, capsys, r"val\.jsonl:\d+: \(record\): is not valid JSON")


def test_games_without_ready_are_not_errors(layout, capsys):
    (layout / P1 / "_READY").unlink()
    (layout / P1 / "train.jsonl").write_text("garbage\n")
    rc, out, err = run_cli(layout, capsys=capsys)
    assert rc == 0
    assert "not ready: expert/Pong" in err
    assert "valid: 1 game," in out


def test_output_is_capped_with_a_count(layout, capsys):
    path = layout / B2 / "train.jsonl"
    recs = lines(path)
    for r in recs:
        r["label"] = 9
    rewrite(path, recs)
    rc, out, _ = run_cli(layout, "--max-lines", "5", capsys=capsys)
    assert rc == 2
    assert len(out.splitlines()) == 6
    assert re.search(rf"\.\.\. and {len(recs) - 5 + 1} more defects", out)  # + the labels histogram


def test_report_holds_only_the_package_error_type(layout):
    edit_record(layout, B2, label="x", target=None, color=1)
    report = validate(layout, images=True)
    assert report.defects and all(isinstance(d, AtariDataError) for d in report.defects)


def test_missing_root_is_a_one_line_error(tmp_path, capsys):
    rc = main(["validate", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1


def _rechunk(png: bytes, kind: bytes, body: bytes) -> bytes:
    """``png`` with the body of its ``kind`` chunk replaced, its CRC recomputed: broken on purpose,
    yet intact at the chunk level, as a careful attacker would write it."""
    import struct
    import zlib

    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        if png[pos + 4 : pos + 8] == kind:
            chunk = struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
            return png[:pos] + chunk + png[pos + 12 + length :]
        pos += 12 + length
    raise AssertionError(kind)


def test_images_checks_each_frame_whole_without_decoding_pixels(layout, capsys, monkeypatch):
    """--images reads our plain frames with one inflate, never through Pillow. Every way such a
    frame can be broken is still one line naming it: a flipped bit in a CRC or in the image data, a
    cut file, image data that inflates a row short or long, a row naming a filter PNG does not
    define, a header naming another filter method, a header declaring more pixels than the frame
    limit (refused before inflating), image data split by another chunk. Each edited chunk has its
    CRC recomputed, as a careful attacker would. Frames with Pillow's row filters pass; other PNGs
    (a palette) go to Pillow after a whole-file check."""
    import io
    import struct
    import zlib

    from atari_data.layout.png import _chunk, encode_png, frame_mode_size

    frame = np.random.default_rng(0).integers(0, 255, (210, 160, 3), np.uint8)
    good = encode_png(frame)
    assert frame_mode_size(good) == ("RGB", (160, 210))
    raw = np.zeros((210, 1 + 160 * 3), np.uint8)
    raw[:, 1:] = frame.reshape(210, -1)
    stream = zlib.compress(raw.tobytes())
    bad_filter = raw.copy()
    bad_filter[7, 0] = 5
    crc_bit, data_bit = bytearray(good), bytearray(good)
    crc_bit[30] ^= 1  # inside IHDR's CRC: only the CRC check can see it
    data_bit[60] ^= 1
    header = struct.pack(">IIBBBBB", 160, 210, 8, 2, 0, 0, 0)
    broken = {
        "crc bit": bytes(crc_bit),
        "data bit": bytes(data_bit),
        "cut": good[: len(good) // 2],
        "short": _rechunk(good, b"IDAT", zlib.compress(raw[:-1].tobytes())),
        "long": _rechunk(good, b"IDAT", zlib.compress(raw.tobytes() + bytes(481))),
        "filter": _rechunk(good, b"IDAT", zlib.compress(bad_filter.tobytes())),
        "method": _rechunk(good, b"IHDR", header[:-2] + b"\x01\x00"),
        "huge": _rechunk(good, b"IHDR", struct.pack(">IIBBBBB", 65535, 65535, 8, 2, 0, 0, 0)),
        "split": good[:33]
        + _chunk(b"IDAT", stream[:500])
        + _chunk(b"tEXt", b"a\0b")
        + _chunk(b"IDAT", stream[500:])
        + _chunk(b"IEND", b""),
    }
    for data in broken.values():
        with pytest.raises(ValueError):
            frame_mode_size(data)
    filtered = io.BytesIO()
    Image.fromarray(frame).save(filtered, format="PNG", optimize=True)
    assert frame_mode_size(filtered.getvalue()) == ("RGB", (160, 210)), "filtered rows are plain frames too"
    palette = io.BytesIO()
    Image.fromarray(frame).quantize(16).save(palette, format="PNG")
    assert frame_mode_size(palette.getvalue()) is None, "a palette PNG is Pillow's to read"
    palette_crc = bytearray(palette.getvalue())
    palette_crc[30] ^= 1

    recs = lines(layout / B2 / "train.jsonl")
    for i, data in enumerate(broken.values()):
        (layout / B2 / recs[i]["image"]).write_bytes(data)
    n = len(broken)  # records 0..n-1 hold the broken frames, then the filtered and the two palette ones
    (layout / B2 / recs[n]["image"]).write_bytes(filtered.getvalue())
    (layout / B2 / recs[n + 1]["image"]).write_bytes(palette.getvalue())
    (layout / B2 / recs[n + 2]["image"]).write_bytes(bytes(palette_crc))
    for i in range(n):
        expect(layout, capsys, rf"train\.jsonl:{i + 1}: image: .* does not decode", "--images")
    expect(layout, capsys, rf"train\.jsonl:{n + 2}: image: .* is P 210x160, expected RGB 210x160", "--images")
    expect(layout, capsys, rf"train\.jsonl:{n + 3}: image: .* does not decode", "--images")
    real_open = Image.open
    opened = []
    monkeypatch.setattr(Image, "open", lambda f, *a, **kw: opened.append(f) or real_open(f, *a, **kw))
    _, out, _ = run_cli(layout, "--images", capsys=capsys)
    assert f"train.jsonl:{n + 1}:" not in out, out
    frames = 2 * sum(len(lines(layout / B2 / f"{split}.jsonl")) for split in ("train", "val"))
    assert frames > 100 and len(opened) <= 6, (
        f"Pillow opened {len(opened)} of {frames} frames: the palette ones, and the step-0 comparisons"
    )


@pytest.mark.parametrize("check", ["png_size", "is_intact", "frame_mode_size", "decode_png"])
def test_a_png_declaring_a_huge_image_is_refused_before_inflating(check):
    """A hostile PNG: a header declaring 65535 x 65535 pixels over 160 MB of zeros compressed to a
    few hundred KB, every CRC right. Whatever reads it (validate, an importer's copy check, doctor's
    side images, a loader) refuses it without inflating the data: memory stays far below it."""
    import tracemalloc
    import zlib

    from atari_data.layout import png

    header = _rechunk(
        png.encode_png(np.zeros((2, 2, 3), np.uint8)), b"IHDR", bytes.fromhex("0000ffff0000ffff0802000000")
    )
    bomb = _rechunk(header, b"IDAT", zlib.compress(bytes(160 << 20), 9))
    tracemalloc.start()
    try:
        try:
            got = getattr(png, check)(bomb)
        except ValueError:
            got = "refused"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got in ("refused", None, False), got
    assert peak < 16 << 20, f"{check} allocated {peak >> 20} MB for a {len(bomb) >> 10} KB file"


@pytest.mark.parametrize("moved", ["Expert-2f", "expert2f/Breakout-v5"])
def test_a_ready_game_under_a_name_the_layout_does_not_read_is_named_not_skipped(layout, capsys, tmp_path, moved):
    """A ready game in a folder named otherwise (a source with a capital or a dash, a game with its
    env id's suffix) was read as absent by validate, stats and pack, without a word."""
    (layout / ("expert2f" if "/" not in moved else "expert2f/Breakout")).rename(layout / moved)
    for argv in (["validate", layout], ["stats", layout], ["pack", layout, tmp_path / "packed"]):
        rc = main([str(a) for a in argv])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, (argv[0], err)
        assert str(layout / moved) in err and "<source>/<Game>" in err, err
    assert not (tmp_path / "packed").exists()
