"""Stream decoded records from the WebDataset shards of a packed repository.

    from atari_data.publish.shards import records
    for rec in records("OUT/webdataset/expert2f/train-{000000..000003}.tar"):
        rec["image"], rec["prev_image"]      # uint8 arrays, as the source gave them
        rec["label"], rec["target"], rec["question"]

Shards are split by node (torch.distributed rank and world size, when initialised) and by
DataLoader worker, so every process reads a disjoint set: give each enough shards.
"""

from __future__ import annotations

import json
import re
from functools import partial

import numpy as np
import orjson

from atari_data.errors import AtariDataError
from atari_data.layout.png import decode_png, formats_of
from atari_data.publish import repo
from atari_data.publish.tar import members
from atari_data.schema import FRAME_FIELDS, JSON_TEXT
from atari_data.schema.types import json_kind
from laya_protocol.errors import cause


def decode_sample(sample: dict, memo: dict | None = None) -> dict:
    """A WebDataset sample (members named as :mod:`atari_data.publish.repo` says) as a record dict.
    ``memo`` (a dict kept between calls) decodes a frame that is the last sample's frame once.

    What pack writes is what is read: a JSON object whose ``id`` is the sample's key and whose
    mappings are JSON text, a frame, and a previous frame of the frame's shape. Anything else is
    one AtariDataError naming the shard and the member."""
    url, key = sample.get("__url__"), sample.get("__key__")
    if repo.RECORD_EXT not in sample:
        raise AtariDataError(f"sample {key!r} has no .{repo.RECORD_EXT} member", file=url)
    rec = _json(sample[repo.RECORD_EXT], url, key)  # messages are built only when raised: this is per sample
    if type(rec) is not dict:
        raise AtariDataError(f"is a JSON {json_kind(rec)}, not an object", file=url, field=_where(key))
    if rec.get("id") != key:
        raise AtariDataError(f"is {rec.get('id')!r}, not the sample's key", file=url, field=_where(key, "id"))
    for name in JSON_TEXT & rec.keys():
        if type(rec[name]) is not str:
            kind = json_kind(rec[name])
            raise AtariDataError(f"is a JSON {kind}, not JSON text", file=url, field=_where(key, name))
        rec[name] = _json(rec[name], url, key, name)
    if FRAME_FIELDS & rec.keys():
        name = min(FRAME_FIELDS & rec.keys())
        raise AtariDataError("is in the record; frames are members of their own", file=url, field=_where(key, name))
    if sample.keys() not in _PLAIN:  # what pack writes needs no more checks than these
        _check_members(sample, url, key)
    for ext in repo.FRAME_EXTS:
        for member, field in ((f"{repo.PREV}.{ext}", "prev_image"), (ext, "image")):  # the previous first
            if member in sample:
                rec[field] = _decode_once(sample[member], ext, memo, url, key, member)
    image, prev = rec.get("image"), rec.get("prev_image")
    if image is None:
        raise AtariDataError(f"sample {key!r} has no frame (.{' or .'.join(repo.FRAME_EXTS)})", file=url)
    if prev is not None and prev.shape != image.shape:
        member = next(m for m in (f"{repo.PREV}.{e}" for e in repo.FRAME_EXTS) if m in sample)
        raise AtariDataError(
            f"is {shape_text(prev)}, the frame is {shape_text(image)}", file=url, field=f"{key}.{member}"
        )
    return rec


_FRAMES = (
    ("previous frame ", frozenset(f"{repo.PREV}.{ext}" for ext in repo.FRAME_EXTS)),
    ("frame ", frozenset(repo.FRAME_EXTS)),
)
_USUAL = frozenset(("__key__", "__url__", repo.RECORD_EXT)).union(*(names for _, names in _FRAMES))
_PLAIN = [  # the members of a sample as pack writes it, one or two frames, PNG or JPEG
    frozenset(("__key__", "__url__", repo.RECORD_EXT, ext, *((f"{repo.PREV}.{ext}",) if two else ())))
    for ext in repo.FRAME_EXTS
    for two in (True, False)
]
_FORMATS = {ext: formats_of(ext) for ext in repo.FRAME_EXTS}


def _check_members(sample: dict, url: str | None, key: str | None) -> None:
    for ext in sample.keys() - _USUAL:  # side images; anything else is no member of ours
        if repo.member_role(ext) is None:
            raise AtariDataError(_STRAY, file=url, field=f"{key}.{ext}")
    for kind, names in _FRAMES:  # one frame and one previous frame, whatever their format
        if len(names & sample.keys()) > 1:
            which = " and ".join(f".{n}" for n in (n for e in repo.FRAME_EXTS for n in names if n.endswith(e)))
            raise AtariDataError(f"sample {key!r} has its {kind}twice ({which})", file=url)


_STRAY = (  # what repo.member_role takes
    f"is not a member of a record (.{repo.RECORD_EXT}, .{' or .'.join(repo.FRAME_EXTS)}, the same after "
    f".{repo.PREV} or .<name>)"
)


def shape_text(frame: np.ndarray) -> str:
    return "x".join(map(str, frame.shape))


def _where(key: str | None, name: str | None = None) -> str:
    return f"{key}.{repo.RECORD_EXT}" + (f": {name}" if name else "")


def _json(text: bytes | str, url: str | None, key: str | None, name: str | None = None):
    try:
        return _loads(text)
    except (ValueError, RecursionError) as e:  # JSON, UTF-8 and int-digit errors are ValueErrors
        raise AtariDataError(f"is not valid JSON ({cause(e, 120)})", file=url, field=_where(key, name)) from None


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


def _decode_once(data: bytes, ext: str, memo: dict | None, url: str | None, key: str | None, member: str) -> np.ndarray:
    # A two-frame sample's previous frame is, as a rule, the sample before's frame: the same bytes.
    # The memo keeps its own copy of the last frame decoded and gives that copy away once, so
    # every array a caller gets is its own (a caller may write into either).
    if memo is not None and memo.get("bytes") == data and memo.get("ext") == ext:  # checked as this format
        del memo["bytes"]
        return memo.pop("frame")
    try:
        frame = decode_png(data, _FORMATS[ext])  # only the format the name says
    except ValueError as e:
        raise AtariDataError(str(e), file=url, field=f"{key}.{member}") from None
    if memo is not None:
        memo.update(bytes=data, ext=ext, frame=frame.copy())
    return frame


def records(urls, split: bool = True, shuffle: int = 0, seed: int = 0):
    """A webdataset pipeline of decoded records; ``shuffle`` > 0 shuffles samples in a buffer that big.

    webdataset's own stages list, split, open and group the shards; only the tar walk is ours
    (:func:`atari_data.publish.tar.members`, 8x faster than tarfile's, with every header checked)."""
    import random

    import webdataset as wds

    if not urls:
        raise AtariDataError("no shards given", field="urls")
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

    for source in _opened(url_opener(shards)):
        url, stream, sample = source["url"], source["stream"], None
        seen: set[str] = set()  # keys of the shard so far: a sample never comes twice
        try:
            for name, data in members(stream, url):
                key, ext = base_plus_ext(name)
                if key is None or _META.match(name):  # no KEY.EXT (macOS's ._ files), or metadata
                    continue
                ext = ext.lower()
                if sample is None or key != sample["__key__"]:
                    if sample is not None:
                        yield sample
                    if key in seen:
                        raise AtariDataError(f"sample {key!r} comes twice in the shard", file=url)
                    seen.add(key)
                    sample = {"__key__": key, "__url__": url}
                if ext in sample:
                    raise AtariDataError(f"{name!r} comes twice in one sample", file=url)
                sample[ext] = data
        finally:
            stream.close()
        if sample is not None:
            yield sample


def _opened(sources):
    """webdataset's opened shards; one that cannot be opened is one AtariDataError naming it."""
    while True:
        try:
            yield next(sources)
        except StopIteration:
            return
        except OSError as e:
            raise AtariDataError(f"cannot be read ({e.strerror or e})", file=e.filename) from None


_META = re.compile(r"__[^/]*__($|/)")  # webdataset's own metadata members, skipped as it skips them
