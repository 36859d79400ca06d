"""Stream decoded records from the WebDataset shards of a packed repository.

    from atari_data.shards import records
    for rec in records("OUT/webdataset/expert2f/train-{000000..000003}.tar"):
        rec["image"], rec["prev_image"]      # uint8 arrays, as the source gave them
        rec["label"], rec["target"], rec["question"]

Shards are split by node (torch.distributed rank and world size, when initialised) and by
DataLoader worker, so every process reads a disjoint set: give each enough shards.
"""

from __future__ import annotations

import io
import json

import numpy as np
from PIL import Image

from atari_data.png import decode_png


def decode_sample(sample: dict) -> dict:
    """A WebDataset sample (``json``, ``png``/``jpg``, ``prev.png``/``prev.jpg``) as a record dict."""
    rec = json.loads(sample["json"])
    for key, field in (("png", "image"), ("prev.png", "prev_image")):
        if key in sample:
            rec[field] = decode_png(sample[key])
    for key, field in (("jpg", "image"), ("prev.jpg", "prev_image")):
        if key in sample:
            with Image.open(io.BytesIO(sample[key])) as im:
                rec[field] = np.asarray(im)
    return rec


def records(urls, split: bool = True, shuffle: int = 0, seed: int = 0):
    """A webdataset pipeline of decoded records; ``shuffle`` > 0 shuffles samples in a buffer that big."""
    import webdataset as wds

    ds = wds.WebDataset(urls, shardshuffle=False, nodesplitter=wds.split_by_node if split else None,
                        workersplitter=wds.split_by_worker if split else None, empty_check=False)
    if shuffle:
        ds = ds.shuffle(shuffle, rng=__import__("random").Random(seed))
    return ds.map(decode_sample)
