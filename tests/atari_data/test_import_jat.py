"""The JAT importer on Parquet files written here in the upstream layout: one row per game,
RGBA PNG 4-stacks (R oldest ... A newest), minimal-set actions, and the quirks: config names that
are not the ALE name, a game stored with the stack's bytes reshaped, broken files."""

import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from atari_data.cli import main
from atari_data.layout import list_games
from atari_data.layout.validate import validate
from atari_data.produce.sources import jat
from laya_protocol.seeds import IMPORTED_VAL_FROM

from ..promises import returns_within, run_cli
from .conftest import tree_bytes

TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def frames_of_a_game(rng, n: int) -> list[np.ndarray]:
    return [rng.integers(0, 256, (84, 84), dtype=np.uint8) for _ in range(n)]


def stacks(frames: list[np.ndarray], layout: str = "channels") -> list[bytes]:
    """envpool's stacks (oldest first; at reset all four hold the first frame) as RGBA PNGs."""
    out = []
    for t in range(len(frames)):
        stack = np.stack([frames[max(0, t - k)] for k in (3, 2, 1, 0)])  # [4, 84, 84], oldest first
        rgba = np.moveaxis(stack, 0, -1) if layout == "channels" else stack.reshape(84, 84, 4)
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(rgba), "RGBA").save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def write_config(
    root, config: str, split: str, games: list[tuple[list[bytes], list[int]]], name=None, compression="snappy"
):
    folder = root / config
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "image_observations": pa.array(
                [[{"bytes": b, "path": None} for b in imgs] for imgs, _ in games], pa.list_(TYPE)
            ),
            "discrete_actions": pa.array([acts for _, acts in games], pa.list_(pa.int64())),
            "rewards": pa.array([[0.0] * len(acts) for _, acts in games], pa.list_(pa.float32())),
        }
    )
    path = folder / (name or f"{split}-00000-of-00001.parquet")
    pq.write_table(table, path, compression=compression)
    return path


@pytest.fixture
def source(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "jat-dataset"
    truth = {}
    for config, layout, n_actions in (("atari-breakout", "channels", 4), ("atari-kongfumaster", "reshaped", 14)):
        for split, n_games in (("train", 3), ("test", 1)):
            games = []
            for g in range(n_games):
                frames = frames_of_a_game(rng, 30)
                acts = rng.integers(0, n_actions, 30).tolist()
                games.append((stacks(frames, layout), acts))
                truth[(config, split, g)] = (frames, acts)
            write_config(root, config, split, games)
    return root, truth


def test_jat_import_keeps_the_newest_frame_in_the_established_order(source, tmp_path, capsys):
    root, truth = source
    out = tmp_path / "layout"
    assert main(["import", "jat", "--from", str(root), "--root", str(out)]) == 0
    assert "jat/Breakout: 90 train, 30 val records" in capsys.readouterr().out
    assert validate(out, images=True).ok
    games = {g.game: g for g in list_games(out)}
    assert set(games) == {"Breakout", "KungFuMaster"}, "config quirks map to ALE v5 names"
    for config, game in (("atari-breakout", "Breakout"), ("atari-kongfumaster", "KungFuMaster")):
        g = games[game]
        meta = g.meta()
        assert meta["frame_format"] == "gray_84x84" and meta["frames"] == 1 and meta["license"] == "Apache-2.0"
        for split, jat_split in (("train", "train"), ("val", "test")):
            for rec in g.records(split):
                index = rec["episode"] - (0 if split == "train" else IMPORTED_VAL_FROM)
                frames, acts = truth[(config, jat_split, index)]
                assert np.array_equal(g.frame(rec), frames[rec["step"]]), "the newest frame, unscrambled"
                assert rec["label"] == acts[rec["step"]] and "target" not in rec
    val_eps = {r["episode"] for r in games["Breakout"].records("val")}
    train_eps = {r["episode"] for r in games["Breakout"].records("train")}
    assert val_eps and train_eps and not val_eps & train_eps


def test_jat_import_is_deterministic(source, tmp_path):
    root, _ = source
    for name in ("a", "b"):
        assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / name), "--games", "Breakout"]) == 0
    a, b = (tmp_path / n / "jat" / "Breakout" for n in ("a", "b"))
    assert (a / "train.jsonl").read_bytes() == (b / "train.jsonl").read_bytes()
    assert (a / "meta.json").read_bytes() == (b / "meta.json").read_bytes()


def test_bad_frames_and_actions_are_counted_drops(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "src"
    frames = frames_of_a_game(rng, 20)
    imgs, acts = stacks(frames), rng.integers(0, 4, 20).tolist()
    imgs[7] = b"\x89PNG\r\n\x1a\n broken"
    buf = io.BytesIO()  # an intact stack of the wrong size: it was kept, and failed validate --images
    Image.fromarray(rng.integers(0, 256, (100, 100, 4), dtype=np.uint8), "RGBA").save(buf, format="PNG")
    imgs[19] = buf.getvalue()
    acts[11] = 9  # Breakout's minimal set has 4 actions
    write_config(root, "atari-breakout", "train", [(imgs, acts)])
    meta = jat.import_game(root, tmp_path / "out", "Breakout")
    assert meta["dropped"] == {"action_out_of_range": 1, "corrupt_image": 2}
    assert meta["train"]["records"] == 17
    assert validate(tmp_path / "out", images=True).ok


@pytest.mark.parametrize(
    "damage,message",
    [
        ("truncate", "not a readable Parquet file"),
        ("columns", "missing column(s) ['discrete_actions', 'rewards']"),
        ("order", "do not shift by one frame"),
        # 64 MB of zeros in 20 KB: a row group is read whole, so a file of a few hundred KB held 6 GB
        ("bomb", "inflates"),
        # one 128 KB value stored once in the dictionary page and referred to 400 times: the footer
        # counts it once (a reviewer's 172 KB file of this kind took 6 GB)
        ("dictionary bomb", "inflates"),
        # 4 million equal actions run-length encoded into a few bytes: the footer counts the values
        ("run-length bomb", "inflates"),
        # the same with a fixed-length byte column, which pyarrow cannot keep as a dictionary
        ("fixed-length dictionary bomb", "inflates"),
        # 2 million equal rewards beside 256 KB of noise: 16 MB as numbers, 64 MB as Python floats
        ("values costly in Python", "inflates"),
        # the first game's frames are null: the frame order is established from a later game
        ("null first game", "row 0: image_observations, discrete_actions, rewards must be lists"),
    ],
)
def test_broken_sources_are_one_line_errors_and_write_nothing(tmp_path, capsys, damage, message):
    rng = np.random.default_rng(2)
    root = tmp_path / "src"
    frames = frames_of_a_game(rng, 20)
    path = write_config(root, "atari-breakout", "train", [(stacks(frames), [0] * 20)])
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "bomb":
        write_config(root, "atari-breakout", "train", [([bytes(1 << 20)] * 64, [0] * 64)], compression="zstd")
    elif damage == "dictionary bomb":
        value = rng.integers(0, 256, 128 << 10, dtype=np.uint8).tobytes()  # incompressible
        write_config(root, "atari-breakout", "train", [([value] * 400, [0] * 400)], compression="zstd")
        assert "RLE_DICTIONARY" in pq.ParquetFile(path).metadata.row_group(0).column(0).encodings
    elif damage == "fixed-length dictionary bomb":
        value = rng.integers(0, 256, 128 << 10, dtype=np.uint8).tobytes()
        fixed = pa.struct([("bytes", pa.binary(len(value))), ("path", pa.string())])
        table = pa.table(
            {
                "image_observations": pa.array([[{"bytes": value, "path": None}] * 400], pa.list_(fixed)),
                "discrete_actions": pa.array([[0] * 400], pa.list_(pa.int64())),
                "rewards": pa.array([[0.0] * 400], pa.list_(pa.float32())),
            }
        )
        pq.write_table(table, path, dictionary_pagesize_limit=1 << 20)
        assert pq.ParquetFile(path).schema.column(0).physical_type == "FIXED_LEN_BYTE_ARRAY"
    elif damage == "values costly in Python":
        noise = rng.integers(0, 256, 256 << 10, dtype=np.uint8).tobytes()
        table = pa.table(
            {
                "image_observations": pa.array([[{"bytes": noise, "path": None}]], pa.list_(TYPE)),
                "discrete_actions": pa.array([[0]], pa.list_(pa.int64())),
                "rewards": pa.ListArray.from_arrays([0, 2_000_000], np.zeros(2_000_000, np.float32)),
            }
        )
        pq.write_table(table, path, compression="zstd")
    elif damage == "run-length bomb":
        table = pa.table(
            {
                "image_observations": pa.array([[{"bytes": stacks(frames)[0], "path": None}]], pa.list_(TYPE)),
                "discrete_actions": pa.ListArray.from_arrays([0, 4_000_000], np.zeros(4_000_000, np.int64)),
                "rewards": pa.array([[0.0]], pa.list_(pa.float32())),
            }
        )
        pq.write_table(table, path, compression="zstd")
    elif damage == "null first game":
        game = [{"bytes": b, "path": None} for b in stacks(frames)]
        table = pa.table(
            {
                "image_observations": pa.array([None, game], pa.list_(TYPE)),
                "discrete_actions": pa.array([[0] * 20] * 2, pa.list_(pa.int64())),
                "rewards": pa.array([[0.0] * 20] * 2, pa.list_(pa.float32())),
            }
        )
        pq.write_table(table, path)
    elif damage == "columns":
        pq.write_table(
            pa.table({"image_observations": pa.array([[{"bytes": b"", "path": None}]], pa.list_(TYPE))}), path
        )
    else:  # frames shuffled: no byte layout makes consecutive stacks shift by one
        order = rng.permutation(20)
        write_config(root, "atari-breakout", "train", [([stacks(frames)[i] for i in order], [0] * 20)])
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "out" / "jat" / "Breakout").exists(), "nothing half-written"


@pytest.mark.parametrize("kind", ["binary", "fixed-length binary"])
def test_a_dictionary_bomb_is_refused_before_arrow_expands_it(tmp_path, kind):
    """Refused is not enough: pyarrow's own memory pool must never have held the expanded column
    (51 MB here, from a file of 130 KB). Measured in a fresh process, whose pool peak is this read's."""
    import subprocess
    import sys

    value = np.random.default_rng(0).integers(0, 256, 128 << 10, dtype=np.uint8).tobytes()
    frame = pa.struct([("bytes", pa.binary(len(value)) if kind != "binary" else pa.binary()), ("path", pa.string())])
    folder = tmp_path / "src" / "atari-breakout"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "image_observations": pa.array([[{"bytes": value, "path": None}] * 400], pa.list_(frame)),
            "discrete_actions": pa.array([[0] * 400], pa.list_(pa.int64())),
            "rewards": pa.array([[0.0] * 400], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, folder / "train-00000-of-00001.parquet", dictionary_pagesize_limit=1 << 20)
    code = (
        "import sys, pyarrow as pa; from atari_data.cli import main; "
        f"c = main(['import', 'jat', '--from', {str(tmp_path / 'src')!r}, '--root', {str(tmp_path / 'out')!r}]); "
        "print(pa.default_memory_pool().max_memory()); sys.exit(c)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "inflates" in done.stderr, done.stderr
    peak = int(done.stdout.split()[-1])
    assert peak < 400 * len(value) // 4, f"arrow held {peak:,} bytes: the dictionary was expanded before the check"


def hub_cache(cache, repo: str, files: dict[str, bytes], repo_type: str = "dataset") -> str:
    """A repo in a Hugging Face Hub cache, laid out as huggingface_hub writes it: content in
    ``blobs/<sha256>``, ``snapshots/<commit>/<path>`` symlinks to the blobs, ``refs/main`` naming
    the commit. Returns the commit."""
    import hashlib

    folder = cache / (f"{repo_type}s--" + repo.replace("/", "--"))
    commit = hashlib.sha1(repo.encode()).hexdigest()
    (folder / "blobs").mkdir(parents=True)
    for path, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = folder / "snapshots" / commit / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return commit


def test_hub_source_resolves_from_the_hub_cache_offline(source, tmp_path, capsys, monkeypatch):
    import huggingface_hub.constants

    root, _ = source
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.parquet"))
        if p.parent.name == "atari-breakout"
    }
    hub_cache(tmp_path / "hub", jat.REPO, files)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert (
        main(["import", "jat", "--from", f"hub:{jat.REPO}", "--root", str(tmp_path / "out"), "--games", "Breakout"])
        == 0
    )
    assert "jat/Breakout: 90 train, 30 val records" in capsys.readouterr().out
    local = tmp_path / "local"
    assert main(["import", "jat", "--from", str(root), "--root", str(local), "--games", "Breakout"]) == 0
    for name in ("train.jsonl", "val.jsonl"):
        assert (tmp_path / "out/jat/Breakout" / name).read_bytes() == (local / "jat/Breakout" / name).read_bytes()


def test_offline_hub_source_names_the_local_alternative(tmp_path, capsys):
    assert (
        main(["import", "jat", "--from", "hub:jat-project/jat-dataset", "--root", str(tmp_path), "--games", "Pong"])
        == 2
    )
    assert "pass --from DIR" in capsys.readouterr().err


def test_meta_records_origin(source, tmp_path):
    root, _ = source
    meta = jat.import_game(root, tmp_path / "out", "Breakout")
    assert json.loads(json.dumps(meta))["origin"] == "jat-project/jat-dataset (atari-breakout)"


def test_workers_give_the_same_bytes_as_one_process(source, tmp_path):
    root, _ = source
    for name, extra in (("one", []), ("pool", ["--workers", "2"])):
        assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / name)] + extra) == 0
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "pool")
    assert {p.parent.name for p in (tmp_path / "pool").glob("jat/*/_READY")} == {"Breakout", "KungFuMaster"}


def test_a_bad_game_in_a_worker_is_a_one_line_error(source, tmp_path, capsys):
    root, _ = source
    (root / "atari-kongfumaster" / "train-00000-of-00001.parquet").write_bytes(b"not parquet")
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "out"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable Parquet file" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "jat" / "KungFuMaster").exists()


@pytest.mark.slow
def test_ray_executor_gives_the_local_bytes(source, tmp_path, capsys, ray_local):
    root, _ = source
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "local")]) == 0
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "ray"), "--executor", "ray"]) == 0
    printed = capsys.readouterr().out
    (root / "atari-kongfumaster" / "train-00000-of-00001.parquet").write_bytes(b"not parquet")
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "bad"), "--executor", "ray"]) == 2
    assert tree_bytes(tmp_path / "local") == tree_bytes(tmp_path / "ray")
    assert printed.index("jat/Breakout") < printed.index("jat/KungFuMaster"), "summaries in game order"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a readable Parquet file" in err


def test_a_fifo_for_a_parquet_file_is_one_line_not_a_wait(tmp_path):
    folder = tmp_path / "src" / "atari-breakout"
    folder.mkdir(parents=True)
    fifo = folder / "train-00000-of-00001.parquet"
    os.mkfifo(fifo)
    argv = ["import", "jat", "--from", str(tmp_path / "src"), "--root", str(tmp_path / "out")]
    done, got = returns_within(60, lambda: run_cli(main, argv), [fifo])
    assert done, "the import waited on the FIFO"
    code, _, err = got
    assert code == 2 and err.count("\n") == 1 and "not a regular file" in err, err


def test_an_error_is_one_line_whatever_it_quotes():
    """pyarrow's messages end in a newline; a file name may hold one."""
    from atari_data.errors import AtariDataError

    text = AtariDataError("not a readable Parquet file (OSError: no more data.\n)", file="a\nb.parquet").render()
    assert "\n" not in text and "b.parquet" in text and "no more data" in text


@pytest.mark.parametrize(
    "planted",
    ["root is a file", "source is a file", "source links out", "stage links out", "stage dangles", "game links out"],
)
def test_odd_things_in_the_target_are_one_line_or_replaced_never_written_through(source, tmp_path, capsys, planted):
    """Each was a traceback (a file where a folder goes, a planted staging link), a game left
    unready with a stray `.Breakout.old` that failed every rerun (the game folder a link), or a game
    written outside the root (the source folder a link)."""
    src, _ = source
    root, outside = tmp_path / "out", tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    root.mkdir()
    where = {
        "root is a file": root,
        "source is a file": root / "jat",
        "source links out": root / "jat",
        "stage links out": root / "jat" / ".Breakout.partial",
        "stage dangles": root / "jat" / ".Breakout.partial",
        "game links out": root / "jat" / "Breakout",
    }[planted]
    if planted == "root is a file":
        root.rmdir()
    where.parent.mkdir(parents=True, exist_ok=True)
    if planted.endswith("is a file"):
        where.write_text("precious")
    else:
        where.symlink_to(tmp_path / "nowhere" if planted == "stage dangles" else outside)
    argv = ["import", "jat", "--from", str(src), "--root", str(root), "--games", "Breakout"]
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and sorted(p.name for p in outside.iterdir()) == ["keep.txt"], err
    assert (outside / "keep.txt").read_text() == "precious"
    if planted in ("root is a file", "source is a file", "source links out"):
        assert code == 2 and err.count("\n") == 1, err
        assert planted == "source links out" or where.read_text() == "precious"
        return
    assert code == 0, err
    assert validate(root, images=True).ok and not list((root / "jat").glob(".Breakout.*"))
    assert main([*argv, "--force"]) == 0, capsys.readouterr().err  # and again


def test_a_game_named_twice_is_imported_once(source, tmp_path, capsys):
    """`--games Breakout,Breakout --workers 2` started two writers of one game; the second was
    refused by the first's lock."""
    root, _ = source
    argv = ["import", "jat", "--from", str(root), "--root", str(tmp_path / "out"), "--games", "Breakout,Breakout"]
    assert main([*argv, "--workers", "2"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.count("jat/Breakout:") == 1


def test_a_folder_that_is_no_game_is_named(source, tmp_path, capsys):
    root, _ = source
    (root / "atari-notagame").mkdir()
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "atari-notagame: (folder):" in err, err


def test_two_folders_of_one_game_are_named_not_one_read(source, tmp_path, capsys):
    """From a hostile review: atari-breakout and another folder that is Breakout too: only one was
    read and the other's games ignored, exit 0."""
    import shutil

    root, _ = source
    shutil.copytree(root / "atari-breakout", root / "atari-Breakout")
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "atari-Breakout" in err and "atari-breakout" in err and "Breakout" in err, err


def test_a_file_in_the_other_frame_order_is_refused_not_misread(tmp_path, capsys):
    """From a hostile review: the frame order was established on the first train file only, so a
    test file in the other byte order imported (exit 0, validate passing) with every val frame
    another than the newest."""
    rng = np.random.default_rng(0)
    root = tmp_path / "jat-dataset"
    write_config(root, "atari-breakout", "train", [(stacks(frames_of_a_game(rng, 30)), [0] * 30)])
    write_config(root, "atari-breakout", "test", [(stacks(frames_of_a_game(rng, 30), "reshaped"), [0] * 30)])
    assert main(["import", "jat", "--from", str(root), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "test-00000-of-00001.parquet" in err and "order" in err, err
