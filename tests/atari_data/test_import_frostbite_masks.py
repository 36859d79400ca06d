"""The Frostbite-with-masks importer on Parquet written here as the dataset card describes it:
128x128 RGB observations, 0/255 masks, full-set action ids, terminal flags that end lives."""

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from atari_data.cli import main
from atari_data.layout import list_games
from atari_data.layout.png import decode_png
from atari_data.layout.validate import validate

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def png(array, mode):
    buf = io.BytesIO()
    Image.fromarray(array, mode).save(buf, format="PNG")
    return buf.getvalue()


def write_split(
    folder, split, n, rng, terminal_at=(), truncated_at=(), bad_action=None, bad_mask=None, cut_observation=None
):
    obs = [png(rng.integers(0, 256, (128, 128, 3), dtype=np.uint8), "RGB") for _ in range(n)]
    masks = [png((rng.random((128, 128)) > 0.9).astype(np.uint8) * 255, "L") for _ in range(n)]
    if bad_mask is not None:
        masks[bad_mask] = b"not a png"
    if cut_observation is not None:  # the header still says 128x128: only the whole PNG shows the damage
        obs[cut_observation] = obs[cut_observation][:-100]
    actions = [int(a) for a in rng.integers(0, 18, n)]
    if bad_action is not None:
        actions[bad_action] = 42
    table = pa.table(
        {
            "observation": pa.array([{"bytes": b, "path": None} for b in obs], IMAGE),
            "mask": pa.array([{"bytes": b, "path": None} for b in masks], IMAGE),
            "action": pa.array(actions, pa.int32()),
            "reward": pa.array([0.0] * n, pa.float32()),
            "terminated": pa.array([i in terminal_at for i in range(n)]),
            "truncated": pa.array([i in truncated_at for i in range(n)]),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / f"{split}-00000-of-00001.parquet")
    return obs, masks


@pytest.fixture
def source(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "frostbite" / "FrostbiteNoFrameskip-v4"
    train = write_split(
        folder, "train", 30, rng, terminal_at=(9, 19), truncated_at=(19,), bad_action=3, bad_mask=25, cut_observation=15
    )
    test = write_split(folder, "test", 10, rng, terminal_at=(9,))
    return tmp_path / "frostbite", train, test


def test_frostbite_import_keeps_frames_and_masks_and_counts_lives(source, tmp_path, capsys):
    root, (obs, masks), _ = source
    out = tmp_path / "layout"
    assert main(["import", "frostbite_masks", "--from", str(root), "--root", str(out)]) == 0
    assert (
        "frostbite_masks/Frostbite: 27 train, 10 val records; dropped: bad_mask 1, bad_observation 1, invalid_action 1"
    ) in capsys.readouterr().out
    assert validate(out, images=True).ok
    g = list_games(out)[0]
    assert g.meta()["frame_format"] == "rgb_128x128"
    train = list(g.records("train"))
    assert {r["episode"] for r in train} == {0, 1, 2}, "one episode per life"
    assert 3 not in {r["provenance"]["row"] for r in train}, "the row with a bad action was dropped"
    by_life = {(r["provenance"]["game"], r["provenance"]["life"]) for r in train}
    assert by_life == {(0, 0), (0, 1), (1, 0)}, "a truncation starts a new game"
    for rec in train:
        i = rec["provenance"]["row"]
        assert (g.path / rec["image"]).read_bytes() == obs[i], "observations copied as given"
        assert (g.path / rec["provenance"]["mask"]).read_bytes() == masks[i], "the mask beside its frame"


def test_pack_carries_the_masks_in_the_webdataset_shards(source, tmp_path, capsys):
    import tarfile

    root, (obs, masks), _ = source
    out, packed = tmp_path / "layout", tmp_path / "packed"
    assert main(["import", "frostbite_masks", "--from", str(root), "--root", str(out)]) == 0
    assert main(["pack", str(out), str(packed)]) == 0
    members = {}
    for shard in sorted((packed / "webdataset" / "frostbite_masks" / "Frostbite").glob("train-*.tar")):
        with tarfile.open(shard) as tar:
            members.update({m.name: tar.extractfile(m).read() for m in tar})
    g = list_games(out)[0]
    train = list(g.records("train"))
    for rec in train:  # the same pixels (pack re-compresses PNGs losslessly)
        pixels = {ext: decode_png(members[f"{rec['id']}.{ext}"]) for ext in ("mask.png", "png")}
        assert np.array_equal(pixels["mask.png"], decode_png(masks[rec["provenance"]["row"]]))
        assert np.array_equal(pixels["png"], decode_png(obs[rec["provenance"]["row"]]))
    capsys.readouterr()
    assert main(["doctor", str(packed)]) == 0, capsys.readouterr().out  # every member the writer writes is known
    capsys.readouterr()
    assert main(["pack", str(out), str(tmp_path / "pq"), "--formats", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "side images" in err and "--formats" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "pq").exists()


def test_missing_columns_are_a_one_line_error(tmp_path, capsys):
    folder = tmp_path / "src"
    folder.mkdir()
    pq.write_table(pa.table({"observation": pa.array([1])}), folder / "train-00000-of-00001.parquet")
    assert main(["import", "frostbite_masks", "--from", str(folder), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing column(s) ['mask', 'action'" in err


def test_a_life_longer_than_any_episode_is_refused_not_held(tmp_path):
    """Without terminal flags every row of a split was held as one life, in memory (1.9 GB for a
    76 MB file); a life is at most the protocol's frame cap, so one past it is refused."""
    from atari_data.errors import AtariDataError
    from atari_data.produce.sources.frostbite_masks import lives

    folder = tmp_path / "f"
    write_split(folder, "train", 12, np.random.default_rng(0), terminal_at=(3,))
    files = sorted(folder.glob("*.parquet"))
    assert [len(run) for _, _, run in lives(files, longest=8)] == [4, 8]  # the last ends the file
    with pytest.raises(AtariDataError, match="rows 4-11: no terminal flag in 8 rows"):
        list(lives(files, longest=7))


@pytest.mark.parametrize("flags", [["False"] * 10, [None] * 10])
def test_terminal_flags_that_are_not_booleans_are_one_line(tmp_path, capsys, flags):
    """From a hostile review: flags stored as the text "False" were true (every row its own life:
    30 train episodes for 3), and nulls were read as false, silently."""
    folder = tmp_path / "src"
    write_split(folder, "train", 10, np.random.default_rng(0), terminal_at=(4,))
    path = folder / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    table = table.set_column(table.schema.get_field_index("terminated"), "terminated", pa.array(flags, pa.string()))
    pq.write_table(table, path)
    assert main(["import", "frostbite_masks", "--from", str(folder), "--root", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "terminated" in err and "expected true or false" in err, err


def test_a_mask_that_is_not_a_grey_image_is_a_counted_drop(tmp_path, capsys):
    """From a hostile review: an RGB or 16-bit mask of the right size was imported as the mask (the
    card's is an L image of 0/255), and validate, pack and doctor passed it."""
    folder = tmp_path / "src"
    rng = np.random.default_rng(0)
    write_split(folder, "train", 10, rng, terminal_at=(9,))
    path = folder / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    masks = table.column("mask").to_pylist()
    masks[2] = {"bytes": png(np.zeros((128, 128, 3), np.uint8), "RGB"), "path": None}
    sixteen = io.BytesIO()
    Image.new("I;16", (128, 128)).save(sixteen, format="PNG")
    masks[5] = {"bytes": sixteen.getvalue(), "path": None}
    table = table.set_column(table.schema.get_field_index("mask"), "mask", pa.array(masks, IMAGE))
    pq.write_table(table, path)
    assert main(["import", "frostbite_masks", "--from", str(folder), "--root", str(tmp_path / "out")]) == 0
    assert list_games(tmp_path / "out")[0].meta()["dropped"].get("bad_mask") == 2
