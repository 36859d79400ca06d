"""Stream decoded records from the WebDataset shards of a packed repository.

    from atari_data.publish.shards import records
    for rec in records("OUT/webdataset/expert2f/train-{000000..000003}.tar"):
        rec["image"], rec["prev_image"]      # uint8 arrays, as the source gave them
        rec["label"], rec["target"], rec["question"]

Shards are split by node (torch.distributed rank and world size, when initialised) and by
DataLoader worker, so every process reads a disjoint set: give each enough shards.
"""

from __future__ import annotations

import io
import json
from functools import partial

import numpy as np
from PIL import Image

from atari_data.layout.png import decode_png
from atari_data.publish import repo
from atari_data.schema import JSON_TEXT


def decode_sample(sample: dict, memo: dict | None = None) -> dict:
    """A WebDataset sample (members named as :mod:`atari_data.publish.repo` says) as a record dict.
    ``memo`` (a dict kept between calls) decodes a frame that is the last sample's frame once."""
    rec = json.loads(sample[repo.RECORD_EXT])
    for name in JSON_TEXT & rec.keys():
        rec[name] = json.loads(rec[name])
    for ext in repo.FRAME_EXTS:
        for key, field in ((f"{repo.PREV}.{ext}", "prev_image"), (ext, "image")):  # the previous first
            if key in sample:
                rec[field] = _decode_once(sample[key], ext, memo)
    return rec


def _decode_once(data: bytes, ext: str, memo: dict | None) -> np.ndarray:
    # A two-frame sample's previous frame is, as a rule, the sample before's frame: the same bytes.
    if memo is not None and memo.get("bytes") == data:
        return memo["frame"].copy()  # a copy: a caller may write into either
    frame = _decode(data, ext)
    if memo is not None:
        memo.update(bytes=data, frame=frame.copy())  # kept apart from what the caller gets
    return frame


def _decode(data: bytes, ext: str) -> np.ndarray:
    if ext == "png":
        return decode_png(data)
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


def records(urls, split: bool = True, shuffle: int = 0, seed: int = 0):
    """A webdataset pipeline of decoded records; ``shuffle`` > 0 shuffles samples in a buffer that big."""
    import webdataset as wds

    ds = wds.WebDataset(
        urls,
        shardshuffle=False,
        nodesplitter=wds.split_by_node if split else None,
        workersplitter=wds.split_by_worker if split else None,
        empty_check=False,
    )
    if shuffle:
        ds = ds.shuffle(shuffle, rng=__import__("random").Random(seed))
    return ds.map(partial(decode_sample, memo={}))
