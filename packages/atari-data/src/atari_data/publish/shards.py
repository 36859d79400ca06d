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
import re
from functools import partial

import numpy as np
import orjson
from PIL import Image

from atari_data.errors import AtariDataError
from atari_data.layout.png import decode_png
from atari_data.publish import repo
from atari_data.publish.tar import members
from atari_data.schema import JSON_TEXT


def decode_sample(sample: dict, memo: dict | None = None) -> dict:
    """A WebDataset sample (members named as :mod:`atari_data.publish.repo` says) as a record dict.
    ``memo`` (a dict kept between calls) decodes a frame that is the last sample's frame once."""
    if repo.RECORD_EXT not in sample:
        raise AtariDataError(
            f"sample {sample.get('__key__')!r} has no .{repo.RECORD_EXT} member", file=sample.get("__url__")
        )
    rec = _loads(sample[repo.RECORD_EXT])
    for name in JSON_TEXT & rec.keys():
        rec[name] = _loads(rec[name])
    for ext in repo.FRAME_EXTS:
        for key, field in ((f"{repo.PREV}.{ext}", "prev_image"), (ext, "image")):  # the previous first
            if key in sample:
                rec[field] = _decode_once(sample[key], ext, memo)
    return rec


def _loads(text: bytes | str):
    """JSON as the standard library reads it, by orjson (3x faster) where that reads it the same:
    orjson turns an integer past 64 bits into a float (the schema allows any integer), and refuses
    NaN, which the standard library reads."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")  # digits stay bytes
    if _LONG not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


# Every integer of 18 digits or fewer fits in 64 bits. Digits mapped to 0, a run of 19 is one
# substring search: a tenth of the time a regular expression for it takes on a record.
_DIGITS_AS_ZERO, _LONG = bytes.maketrans(b"123456789", b"0" * 9), b"0" * 19


def _decode_once(data: bytes, ext: str, memo: dict | None) -> np.ndarray:
    # A two-frame sample's previous frame is, as a rule, the sample before's frame: the same bytes.
    # The memo keeps its own copy of the last frame decoded and gives that copy away once, so
    # every array a caller gets is its own (a caller may write into either).
    if memo is not None and memo.get("bytes") == data:
        del memo["bytes"]
        return memo.pop("frame")
    frame = _decode(data, ext)
    if memo is not None:
        memo.update(bytes=data, frame=frame.copy())
    return frame


def _decode(data: bytes, ext: str) -> np.ndarray:
    if ext == "png":
        return decode_png(data)
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


def records(urls, split: bool = True, shuffle: int = 0, seed: int = 0):
    """A webdataset pipeline of decoded records; ``shuffle`` > 0 shuffles samples in a buffer that big.

    webdataset's own stages list, split, open and group the shards; only the tar walk is ours
    (:func:`atari_data.publish.tar.members`, 8x faster than tarfile's, with every header checked)."""
    import random

    import webdataset as wds

    stages = [wds.SimpleShardList(urls)]
    if split:
        stages += [wds.split_by_node, wds.split_by_worker]
    stages.append(_samples)
    if shuffle:
        stages.append(wds.shuffle(shuffle, rng=random.Random(seed)))
    stages.append(wds.map(partial(decode_sample, memo={})))
    return wds.FluidWrapper(stages[0]).compose(*stages[1:])


def _samples(shards):
    """Samples of the shards (dicts with ``url``), grouped as webdataset's ``tarfile_to_samples``
    groups them: members split into KEY.EXT by webdataset's own ``base_plus_ext`` (EXT in lower
    case) that follow one another, ``__key__`` and ``__url__`` added, webdataset's ``__name__``
    metadata members skipped, a repeated member an error, a sample never spanning two shards."""
    from webdataset.tariterators import base_plus_ext, url_opener

    for source in url_opener(shards):
        url, stream, sample = source["url"], source["stream"], None
        try:
            for name, data in members(stream, url):
                key, ext = base_plus_ext(name)
                if key is None or _META.match(name):  # no KEY.EXT (macOS's ._ files), or metadata
                    continue
                ext = ext.lower()
                if sample is None or key != sample["__key__"]:
                    if sample is not None:
                        yield sample
                    sample = {"__key__": key, "__url__": url}
                if ext in sample:
                    raise AtariDataError(f"{name!r} comes twice in one sample", file=url)
                sample[ext] = data
        finally:
            stream.close()
        if sample is not None:
            yield sample


_META = re.compile(r"__[^/]*__($|/)")  # webdataset's own metadata members, skipped as it skips them
