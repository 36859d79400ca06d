"""The PlayJev importer on a local copy written here as its card describes it (frames rebuilt in
place): browser games, one source per round, names or indices for moves, MD5-checked frames."""

import hashlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from atari_data.cli import main
from atari_data.layout import list_games
from atari_data.layout.validate import validate

MOVES = ["none", "left", "right", "jump"]


def jpeg(rng):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_shard(root, slug, shard, rng, episodes=3, steps=12, as_index=False, damage=()):
    folder = root / slug / shard
    (folder / "frames").mkdir(parents=True)
    lines = []
    for ep in range(episodes):
        for t in range(steps):
            name = f"frames/e{ep}_s{t}.jpg"
            data = jpeg(rng)
            md5 = hashlib.md5(data).hexdigest()
            if (ep, t) == (0, 5) and "missing" in damage:
                pass  # the rebuild did not write this frame
            else:
                (folder / name).write_bytes(data)
            if (ep, t) == (1, 3) and "md5" in damage:
                md5 = "0" * 32
            probs = rng.dirichlet(np.ones(4)).round(6)
            probs[-1] = round(1 - probs[:-1].sum(), 6)
            best = int(np.argmax(probs))
            move = best if as_index else MOVES[best]
            if (ep, t) == (2, 7) and "move" in damage:
                move = "fly"
            lines.append(
                {
                    "game": slug,
                    "shard": shard,
                    "seed": 1000 + ep,
                    "episode": ep,
                    "step": t,
                    "frame": name,
                    "prev_frame": None if t == 0 else f"frames/e{ep}_s{t - 1}.jpg",
                    "frame_md5": md5,
                    "actions": MOVES,
                    "teacher_probs": probs.tolist(),
                    "teacher_action": move,
                    "taken_action": MOVES[(best + t) % 4],
                    "actor": "teacher",
                    "score": t,
                    "reward": 0,
                    "done": t == steps - 1,
                    "t": 33 * t,
                }
            )
    rng.shuffle(lines)  # collectors interleave episodes
    (folder / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def copy(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng, damage=("missing", "md5", "move"))
    write_shard(root, "floppy_bird", "clone_c", rng)
    write_shard(root, "floppy_bird", "dagger1_a", rng, as_index=True)
    return root


def test_playjev_rounds_become_browser_sources(copy, tmp_path, capsys):
    out = tmp_path / "layout"
    assert main(["import", "playjev", "--from", str(copy), "--root", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "playjev_clone/FloppyBird:" in printed
    assert "bad_move 1, frame_md5_mismatch 1, frame_missing 1, prev_frame_missing 1" in printed
    report = validate(out, images=True)
    assert report.ok, [d.render() for d in report.defects]
    games = {g.source: g for g in list_games(out)}
    assert set(games) == {"playjev_clone", "playjev_dagger1"}
    g = games["playjev_clone"]
    meta = g.meta()
    assert meta["platform"] == "browser" and meta["frame_format"] == "rgb_48x64" and meta["frames"] == 2
    recs = list(g.records("train")) + list(g.records("val"))
    assert len(recs) == 2 * 3 * 12 - 4, "the step after the missing frame lost its previous frame too"
    rec = recs[0]
    assert "browser game FloppyBird" in rec["question"]["instructions"] and rec["actions"] == MOVES
    assert rec["label"] == int(np.argmax(rec["target"]))
    folder = copy / "floppy_bird" / rec["provenance"]["shard"]
    source_frame = folder / f"frames/e{rec['provenance']['source_episode']}_s{rec['provenance']['source_step']}.jpg"
    assert (g.path / rec["image"]).read_bytes() == source_frame.read_bytes(), "frames copied byte for byte"
    later = next(r for r in recs if r["provenance"]["source_step"] == 4 and r["provenance"]["shard"] == "clone_c")
    prev = folder.parent / "clone_c" / f"frames/e{later['provenance']['source_episode']}_s3.jpg"
    assert (g.path / later["prev_image"]).read_bytes() == prev.read_bytes()
    val_eps = {r["episode"] for r in g.records("val")}
    assert val_eps and not val_eps & {r["episode"] for r in g.records("train")}


def test_a_game_the_copy_lacks_is_named_not_skipped(copy, tmp_path, capsys):
    """--games FloppyBird,Snake imported FloppyBird and said nothing of Snake."""
    out = tmp_path / "layout"
    assert main(["import", "playjev", "--from", str(copy), "--root", str(out), "--games", "FloppyBird,Snake"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--games" in err, err
    assert "Snake" in err and "floppy_bird" in err, "names the missing game and what the copy has"
    assert not out.exists(), "refused before anything is written"


def test_a_broken_records_line_is_a_one_line_error(copy, tmp_path, capsys):
    path = copy / "floppy_bird" / "clone_a" / "records.jsonl"
    path.write_text(path.read_text() + "{not json\n")
    assert main(["import", "playjev", "--from", str(copy), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "records.jsonl:37: (record): is not valid JSON" in err


def _replace_frame(folder, episode: int, step: int, data: bytes | None, link_to=None, prev: bool = False) -> None:
    """Swap one frame on disk (its MD5 in records.jsonl kept true), or make it a symlink."""
    path = folder / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    rec = next(r for r in recs if (r["episode"], r["step"]) == (episode, step))
    frame = folder / rec["prev_frame" if prev else "frame"]
    frame.unlink()
    if link_to is not None:
        frame.symlink_to(link_to)
        data = link_to.read_bytes()
    else:
        frame.write_bytes(data)
    if not prev:
        rec["frame_md5"] = hashlib.md5(data).hexdigest()
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize(
    "hostile", ["twice_the_size", "not_a_jpeg", "grey", "frame_link", "prev_frame_link", "frames_folder_link"]
)
def test_frames_not_as_the_game_are_drops_and_links_are_refused(tmp_path, capsys, hostile):
    """A frame of another size or mode, or one that does not decode, was copied and the game marked
    ready, failing validate --images; a frame or previous frame that is a symlink was followed out
    of the shard (the previous frame has no MD5 to catch it), and so was a folder of frames that is
    a symlink (no-follow opens look at the last part of a path only)."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    folder = root / "floppy_bird" / "clone_a"
    if hostile in ("twice_the_size", "grey"):
        buf = io.BytesIO()
        shape = (96, 128, 3) if hostile == "twice_the_size" else (48, 64)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(buf, format="JPEG")
        _replace_frame(folder, 1, 4, buf.getvalue())
    elif hostile == "not_a_jpeg":
        _replace_frame(folder, 1, 4, b"\xff\xd8\xff" + b"not a jpeg" * 10 + b"\xff\xd9")
    elif hostile == "frames_folder_link":
        (folder / "frames").rename(tmp_path / "private")
        (folder / "frames").symlink_to(tmp_path / "private")
    else:
        secret = tmp_path / "private.jpg"
        secret.write_bytes(jpeg(rng))
        _replace_frame(folder, 1, 4, None, link_to=secret, prev=hostile == "prev_frame_link")
    out = tmp_path / "out"
    code = main(["import", "playjev", "--from", str(root), "--root", str(out)])
    err = capsys.readouterr().err
    if hostile.endswith("_link"):
        assert code == 2 and err.count("\n") == 1 and "symbolic link" in err, err
        assert not list(out.rglob("_READY"))
        return
    assert code == 0, err
    report = validate(out, images=True)
    assert report.ok, [d.render() for d in report.defects]
    # the next step's previous frame is the same file
    assert list_games(out)[0].meta()["dropped"] == {"bad_frame": 1, "bad_prev_frame": 1}


@pytest.mark.parametrize("hostile", ["empty", "blank", "step_twice", "train_frames_negative"])
def test_odd_records_and_flags_are_one_line(tmp_path, capsys, hostile):
    """An empty records.jsonl was an IndexError traceback, a repeated (episode, step) an extra
    record, a negative --train-frames a ValueError traceback."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    path = root / "floppy_bird" / "clone_a" / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(
        {"empty": "", "blank": "\n\n", "step_twice": "\n".join([*lines, lines[0]]) + "\n"}.get(
            hostile, path.read_text()
        )
    )
    flags = ["--train-frames", "-1"] if hostile == "train_frames_negative" else []
    assert main(["import", "playjev", "--from", str(root), "--root", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err


@pytest.mark.parametrize("damage", ["md5", "missing"])
def test_a_drop_on_an_episodes_first_step_is_counted_and_the_next_kept_step_opens_the_episode(tmp_path, damage):
    """A drop on a source episode's first step failed the whole game: the next step, with its real
    previous frame, became the layout episode's step 0, where the previous frame is the frame itself."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    folder = root / "floppy_bird" / "clone_a"
    if damage == "md5":
        _replace_frame(folder, 0, 0, jpeg(rng))
        path = folder / "records.jsonl"
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        next(r for r in recs if (r["episode"], r["step"]) == (0, 0))["frame_md5"] = "0" * 32
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        (folder / "frames/e0_s0.jpg").unlink()  # step 1's previous frame too: unread, as step 1 opens the episode
    out = tmp_path / "out"
    assert main(["import", "playjev", "--from", str(root), "--root", str(out)]) == 0
    assert validate(out, images=True).ok
    g = list_games(out)[0]
    assert g.meta()["dropped"] == {"frame_md5_mismatch" if damage == "md5" else "frame_missing": 1}
    recs = [r for s in ("train", "val") for r in g.records(s) if r["provenance"]["source_episode"] == 0]
    first = min(recs, key=lambda r: r["step"])
    assert first["step"] == 0 and first["provenance"]["source_step"] == 1
    assert (g.path / first["prev_image"]).read_bytes() == (g.path / first["image"]).read_bytes()
    assert len(recs) == 11


@pytest.mark.parametrize("field,value", [("score", "NaN"), ("seed", "1" * 400), ("t", "-Infinity")])
def test_provenance_no_reader_takes_is_a_one_line_error_naming_its_line(tmp_path, capsys, field, value):
    """A NaN score was refused naming the staging folder's train.jsonl, and a 400-digit seed was
    written, then refused by the validator as 'not valid JSON', naming the staging folder's line."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    path = root / "floppy_bird" / "clone_a" / "records.jsonl"
    lines = path.read_text().splitlines()
    lines[4] = lines[4].replace(f'"{field}": ', f'"{field}": {value}, "was_{field}": ', 1)
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(["import", "playjev", "--from", str(root), "--root", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:5: {field}:" in err, err
    assert not list(out.rglob("_READY")) and not list(out.rglob("*.partial"))


def _declaring(data: bytes, height: int, width: int) -> bytes:
    """A JPEG whose frame header (SOF0) declares another size: a few bytes that claim gigapixels."""
    at = data.index(b"\xff\xc0") + 5  # marker, length (2), precision (1), then height and width
    return data[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[at + 4 :]


def test_a_first_frame_declaring_gigapixels_is_a_counted_drop(tmp_path, capsys):
    """The frame that sets the game's size was opened with Pillow's default guard: one declaring
    65535x65535 pixels was a DecompressionBombError traceback."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    folder = root / "floppy_bird" / "clone_a"
    first = json.loads((folder / "records.jsonl").read_text().splitlines()[0])["episode"]
    _replace_frame(folder, first, 0, _declaring(jpeg(rng), 65535, 65535))
    out = tmp_path / "out"
    assert main(["import", "playjev", "--from", str(root), "--root", str(out)]) == 0, capsys.readouterr().err
    g = list_games(out)[0]
    assert g.meta()["frame_format"] == "rgb_48x64" and g.meta()["dropped"] == {"bad_frame": 1}
    assert validate(out, images=True).ok


def test_two_folders_of_one_game_are_refused_before_anything_is_written(tmp_path, capsys):
    """From a hostile review: floppy_bird/ and floppy-bird/ are both FloppyBird; without --force the
    second was refused after the first was written and ready, and with --force it replaced the first
    (40 records gone), exit 0."""
    rng = np.random.default_rng(0)
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", rng)
    write_shard(root, "floppy-bird", "clone_a", rng)
    out = tmp_path / "layout"
    for force in ([], ["--force"]):
        assert main(["import", "playjev", "--from", str(root), "--root", str(out), *force]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "playjev_clone/FloppyBird" in err and "floppy-bird" in err, err
        assert not out.exists() or not any(out.rglob("_READY")), "refused before anything is written"


@pytest.mark.parametrize("round_", ["x.y", "a b"])
def test_a_round_name_no_source_may_have_leaves_no_folder(tmp_path, capsys, round_):
    """From a hostile review: a shard named x.y_a was refused (exit 2), and an empty playjev_x.y/ was
    left in the root."""
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", f"{round_}_a", np.random.default_rng(0))
    out = tmp_path / "layout"
    assert main(["import", "playjev", "--from", str(root), "--root", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())


@pytest.mark.parametrize("key", ["frame", "prev_frame"])
def test_a_frame_path_that_leaves_the_shard_names_its_line(tmp_path, capsys, key):
    """From a hostile review: a frame path of '..' or an absolute one was refused naming the shard's
    folder, not the records.jsonl line that holds it."""
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", np.random.default_rng(0))
    path = root / "floppy_bird" / "clone_a" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    at = next(i for i, r in enumerate(recs) if r["step"] == 2)
    recs[at][key] = "../../x.jpg"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["import", "playjev", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"records.jsonl:{at + 1}: {key}:" in err, err


def test_a_move_named_twice_names_the_records_line(tmp_path, capsys):
    """From a hostile review: actions ["flap", "flap", ...] were blamed on the output's meta.json."""
    root = tmp_path / "PlayJev-data"
    write_shard(root, "floppy_bird", "clone_a", np.random.default_rng(0))
    path = root / "floppy_bird" / "clone_a" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for r in recs:
        r["actions"] = [r["actions"][0], *r["actions"][:-1]]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["import", "playjev", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "records.jsonl:" in err and "actions" in err and "meta.json" not in err, err
