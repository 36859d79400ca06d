"""PNG for game frames: a fast deterministic encoder, a decoder, and a whole-file check.

Atari screens are large flat areas of few colours: deflate with no row filter packs them to
about 1 KB. Frames are written with ISA-L's level 1 (``isal``; at 20 us a Pong screen it is 6x
faster than zlib's level 3 and its output is smaller) and re-compressed, when asked, by
libdeflate (``deflate``), which at every level is faster than zlib and no larger. Images are
inflated by libdeflate too, 3-4x faster than zlib. The output is a standard PNG (8-bit grey or
RGB) that any decoder reads back pixel for pixel. :func:`decode_png` reads those without Pillow
and anything else through Pillow; :func:`png_size` checks a PNG that a source copies without
decoding. Figures: docs/benchmarks.md (``tools/bench/png.py``).
"""

from __future__ import annotations

import io
import struct
import zlib

import deflate
import numpy as np
from isal import isal_zlib
from PIL import Image

from atari_data.limits import limit
from atari_data.schema import IMAGE_FORMATS, image_suffix

SIGNATURE = b"\x89PNG\r\n\x1a\n"
LEVELS = range(1, 13)  # libdeflate's levels, for re-compressing (pack's --png-level)
SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel
MODES = {0: "L", 2: "RGB", 6: "RGBA"}  # the colour types read without Image.open
FRAME_FORMATS = tuple(IMAGE_FORMATS.values())  # what a frame may be (Pillow's names)


def formats_of(name: str) -> tuple[str, ...]:
    """The one format a frame file or member named ``name`` may hold, by its suffix (the schema's
    IMAGE_FORMATS); none for another suffix, so nothing decodes it."""
    suffix = image_suffix(name)
    return (IMAGE_FORMATS[suffix],) if suffix else ()


def _chunk(kind: bytes, data: bytes | bytearray) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(frame: np.ndarray, level: int | None = None) -> bytes:
    """PNG bytes of a uint8 frame, H x W (grey) or H x W x 3 (RGB): fast (ISA-L level 1) by default,
    or at libdeflate ``level`` (1-12; 9 packs an Atari screen about 2x smaller, at 15x the time)."""
    if frame.dtype != np.uint8 or frame.ndim not in (2, 3) or (frame.ndim == 3 and frame.shape[2] != 3):
        raise ValueError(f"expected uint8 HxW or HxWx3, got {frame.dtype} {frame.shape}")
    if level is not None and level not in LEVELS:
        raise ValueError(f"level {level} is not a libdeflate level 1-12")
    h, w = frame.shape[:2]
    rows = np.zeros((h, 1 + frame[0].size), np.uint8)  # filter byte 0 (none) before every row
    rows[:, 1:] = frame.reshape(h, -1)
    data = isal_zlib.compress(rows, 1) if level is None else deflate.zlib_compress(rows.tobytes(), level)
    return _png(w, h, 2 if frame.ndim == 3 else 0, data)


def _png(w: int, h: int, colour: int, idat: bytes | bytearray) -> bytes:
    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def recompress(data: bytes, level: int) -> bytes:
    """An 8-bit grey or RGB PNG's pixels encoded again at libdeflate ``level``, as :func:`encode_png`
    writes them; any other image (JPEG, palettes, transparency, 16-bit, 1-bit, interlaced) as it is.
    Lossless and deterministic. Rows written without filters (what generate writes) are
    compressed again as they inflate, without building pixels."""
    plain = _plain_idat(data)
    if plain is None or plain[2] not in (0, 2):
        return data
    w, h, colour, idat = plain
    rows = _unfiltered(idat, h, 1 + w * SAMPLES[colour])
    if rows is None:  # filtered rows: unfiltered by the decoder
        return encode_png(decode_png(data), level)
    return _png(w, h, colour, deflate.zlib_compress(rows, level))


def inflate(data: bytes, size: int) -> bytes | bytearray:
    """A zlib stream's bytes, at most ``size`` of them (the caller's bound on memory); ValueError
    if the stream is broken (its checksum included) or inflates to more."""
    try:
        return deflate.zlib_decompress(data, size)
    except deflate.DeflateError:
        raise ValueError(f"the image data does not inflate to at most {size:,} bytes (broken or too long)") from None


#: A frame's (Pillow mode, (width, height)), as :func:`atari_data.schema.frame_size` reads a meta.json's frame_format.
Want = tuple[str, tuple[int, int]]


def decode_frame(data: bytes, want: Want | None, formats: tuple[str, ...] = FRAME_FORMATS) -> np.ndarray:
    """:func:`decode_png` for a frame of a game whose meta.json says ``want`` (None: not said): a PNG
    or JPEG whose header declares another size is refused before a pixel is decoded, and any frame
    of another mode or size once decoded, in ``validate --images``' words. A reader that took a
    frame at its own size would resize a 4000x4000 one as a 210x160 one, at 48 MB a frame."""
    if want is None:
        return decode_png(data, formats)
    if problem := declared_size_problem(data, want):
        raise ValueError(problem)
    pixels = decode_png(data, formats)
    mode, (w, h) = want
    got = {2: "L", 3: {3: "RGB", 4: "RGBA"}.get(pixels.shape[-1], "?")}.get(pixels.ndim, "?")
    if (got, pixels.shape[:2]) != (mode, (h, w)):
        raise ValueError(f"is {got} {pixels.shape[0]}x{pixels.shape[1]}, {expected_frame(want)}")
    return pixels


def declared_size_problem(data: bytes, want: Want) -> str | None:
    """What is wrong with the size a PNG's or JPEG's header declares, against ``want``, or None
    (another format, or a header that does not read: decoding says what): no pixel is decoded, so
    a reader can check every frame of a split before it trains on any."""
    if data[:8] == SIGNATURE:
        if len(data) < 24 or data[12:16] != b"IHDR":  # the PNG spec puts it first; Pillow reads on anyway
            return "is a PNG whose first chunk is not its header (IHDR)"
        declared = struct.unpack(">II", data[16:24])
    elif data[:3] == b"\xff\xd8\xff":  # a JPEG: its size from its header, read without its pixels
        try:
            with Image.open(io.BytesIO(data), formats=("JPEG",)) as im:
                declared = im.size
        except Exception:  # noqa: BLE001 - a header Pillow cannot read: decoding says what is wrong
            return None
    else:
        return None
    if declared != want[1]:
        return f"declares {declared[1]}x{declared[0]} pixels, {expected_frame(want)}"
    return None


def expected_frame(want: Want) -> str:
    """How a frame's expected mode and size are said (height x width, as frame_format writes them)."""
    mode, (w, h) = want
    return f"expected {mode} {h}x{w} (meta.json frame_format)"


def decode_png(data: bytes, formats: tuple[str, ...] = FRAME_FORMATS) -> np.ndarray:
    """Pixels of a frame as uint8 (H x W, or H x W x 3/4); ValueError saying what is wrong for
    anything that is not a whole image of one of ``formats`` (Pillow's names, the schema's frame
    formats by default) within the frame limit.

    8-bit, non-interlaced grey, RGB and RGBA PNGs of IHDR, IDAT and IEND alone are read without
    parsing the file twice (their chunks' CRCs unchecked: a reader takes what it can): rows
    written without filters (what :func:`encode_png` writes) by one inflate; filtered rows (what
    Pillow and most encoders write) by Pillow's PNG row decoder, handed the image data as it is.
    Anything else (palettes, transparency chunks, 16-bit, interlaced, JPEG) goes through
    :func:`pillow_frame`.
    """
    plain = None
    if "PNG" in formats:
        _check_declared_size(data)
        plain = _plain_idat(data)
    if plain is not None:
        w, h, colour, idat = plain
        channels = SAMPLES[colour]
        raw = _unfiltered(idat, h, 1 + w * channels)
        if raw is not None:
            rows = np.frombuffer(raw, np.uint8).reshape(h, 1 + w * channels)
            return rows[:, 1:].reshape((h, w) if channels == 1 else (h, w, channels)).copy()
        mode = MODES[colour]
        try:
            return np.asarray(Image.frombytes(mode, (w, h), idat, "zip", mode))
        except (OSError, ValueError) as e:  # a filter type PNG does not define, a broken stream
            raise ValueError(f"is a broken PNG image ({e})") from None
    return np.asarray(_eight_bit(pillow_frame(data, formats)))


def _eight_bit(im: Image.Image) -> Image.Image:
    """A frame as grey, RGB or RGBA bytes: a palette as its colours (Pillow gives its indices), grey
    with alpha or a CMYK JPEG as RGB(A), 1-bit as grey. Grey of 16 or 32 bits (Pillow's I and F
    modes) is refused; 16-bit colour Pillow itself reduces to 8 bits."""
    if im.mode in ("L", "RGB", "RGBA"):
        return im
    if im.mode.startswith("I") or im.mode == "F":
        raise ValueError(f"is a {'16' if ';16' in im.mode else '32'}-bit image ({im.mode}); frames are 8-bit")
    if im.mode == "1":
        return im.convert("L")
    alpha = im.mode in ("LA", "PA", "RGBa", "La") or "transparency" in im.info
    return im.convert("RGBA" if alpha else "RGB")


def pillow_frame(data: bytes, formats: tuple[str, ...] = FRAME_FORMATS) -> Image.Image:
    """``data`` decoded by Pillow as one of ``formats`` only, its declared size checked against the
    frame limit before a pixel is decoded; ValueError saying what is wrong otherwise (Pillow's own
    errors are many: OSError, SyntaxError, struct.error, its bomb check...)."""
    if not formats:
        raise ValueError(f"has no frame suffix ({', '.join(IMAGE_FORMATS)})")
    what = " or ".join(formats)
    try:
        im = Image.open(io.BytesIO(data), formats=formats)
    except Image.UnidentifiedImageError:
        raise ValueError(f"is not a {what} image") from None
    except Exception as e:  # noqa: BLE001 - whatever a Pillow plugin raises on a broken header
        raise ValueError(f"is a broken {what} image ({type(e).__name__}: {e})") from None
    w, h = im.size
    _check_size(w, h, w * h * 4)  # 4 bytes a pixel bounds every mode Pillow decodes frames to
    try:
        im.load()
    except Exception as e:  # noqa: BLE001 - as above: truncated data, a broken stream
        raise ValueError(f"is a broken {im.format} image ({type(e).__name__}: {e})") from None
    return im


def _check_declared_size(data: bytes) -> None:
    """Refuse a PNG whose header declares no pixels or more than the frame limit, before inflating anything."""
    if data[:8] == SIGNATURE and len(data) >= 26 and data[12:16] == b"IHDR":
        w, h, depth = struct.unpack(">IIB", data[16:25])
        _check_size(w, h, w * h * 4 * max(1, depth // 8))


def _check_size(w: int, h: int, size: int) -> None:
    if not (w and h):
        raise ValueError(f"has no pixels (its header declares {h}x{w})")
    if size > limit("frame"):
        raise ValueError(
            f"declares {h}x{w} pixels ({size:,} bytes decoded), over the frame limit of {limit('frame') >> 20} MB"
        )


def _unfiltered(idat: bytes, h: int, stride: int) -> bytes | bytearray | None:
    """The inflated rows if no row is filtered, else None (Pillow unfilters them)."""
    rows = inflate(idat, h * stride)
    if len(rows) != h * stride:
        raise ValueError(f"image data ends after {len(rows):,} of {h * stride:,} bytes")
    return None if rows[::stride].strip(b"\0") else rows


def _plain_idat(data: bytes) -> tuple[int, int, int, bytes] | None:
    """(width, height, colour type, IDAT stream) of an 8-bit, non-interlaced grey/RGB/RGBA PNG
    of IHDR, IDAT and IEND alone (what :func:`encode_png` and Pillow write), else None."""
    one_idat = data[:8] == SIGNATURE and data[8:16] == _IHDR_HEAD and data[37:41] == b"IDAT"
    if one_idat and data[-12:] == _IEND:  # what encode_png writes: found by offsets, no chunk walk
        (length,) = struct.unpack(">I", data[33:37])
        if 41 + length + 4 + 12 == len(data):
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
            if depth == 8 and colour in MODES and not interlace:
                return w, h, colour, data[41 : 41 + length]
            return None
    parsed = _chunks(data, strict=False)
    if parsed is None:
        return None
    (w, h, depth, colour, _, _, interlace), idat, kinds = parsed
    if depth != 8 or colour not in MODES or interlace or kinds:  # any other chunk: Pillow reads (and checks) it
        return None
    return w, h, colour, b"".join(idat)


_IHDR_HEAD = struct.pack(">I", 13) + b"IHDR"
_IEND = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


def _chunks(data: bytes, strict: bool) -> tuple[tuple, list[bytes], set[bytes]] | None:
    """(IHDR fields, IDAT bodies, the other chunks' kinds) of a PNG, or None when it is not one.

    ``strict``: every chunk's CRC must match, the IDAT chunks must follow one another (decoders
    stop at the first other chunk after them) and IEND must end the chunks. Otherwise whatever
    chunks are there are read, and a decoder finds out whether the image data is all there.
    """
    if data[:8] != SIGNATURE or data[12:16] != b"IHDR":
        return None
    header, pos, after_idat = None, 8, False
    idat: list[bytes] = []
    kinds: set[bytes] = set()
    while pos + 12 <= len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        end = pos + 12 + length
        body = data[pos + 8 : end - 4]
        if strict and (end > len(data) or data[end - 4 : end] != struct.pack(">I", zlib.crc32(body, zlib.crc32(kind)))):
            return None
        if header is None:
            if length != 13 or len(body) != 13:  # a header cut short is not a PNG header
                return None
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            if strict and after_idat:  # another chunk came between two IDAT chunks
                return None
            idat.append(body)
        elif kind == b"IEND":
            return header, idat, kinds
        else:
            kinds.add(kind)
            after_idat = bool(idat)
        pos = end
    return None if strict or header is None else (header, idat, kinds)


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _whole(data: bytes) -> tuple[tuple, bytes | bytearray, set[bytes]]:
    """(IHDR fields, inflated image data, the other chunks' kinds) of a complete, intact PNG; raises
    ValueError saying what is broken.

    The declared size is within the frame limit (checked before inflating anything), every chunk's
    CRC matches, IHDR comes first, the IDAT chunks follow one another and IEND ends the chunks, the
    header names PNG's compression and filter methods, the image data inflates to exactly the bytes
    the header promises, and each row of a non-interlaced image names a filter type PNG defines.
    One inflate; rows are not unfiltered and no image is built.
    """
    _check_declared_size(data)
    parsed = _chunks(data, strict=True)
    if parsed is None:
        raise ValueError("a chunk's CRC does not match, its IDAT chunks are split, or the chunks end before IEND")
    header, idat, kinds = parsed
    w, h, depth, colour, method, filtering, interlace = header
    if not (w and h and colour in SAMPLES):
        raise ValueError(f"the header names a {w}x{h} image of colour type {colour}")
    if method or filtering:
        raise ValueError(f"the header names compression method {method} and filter method {filtering} (PNG has 0)")
    bits = SAMPLES[colour] * depth
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    expected = 0
    for x0, y0, dx, dy in passes:
        pw, ph = -(-(w - x0) // dx), -(-(h - y0) // dy)
        if pw > 0 and ph > 0:
            expected += ph * (1 + -(-pw * bits // 8))
    rows = inflate(b"".join(idat), expected)
    if len(rows) != expected:
        raise ValueError(f"the image data inflates to {len(rows):,} bytes, not the {expected:,} its header says")
    if not interlace and max(rows[:: expected // h]) > 4:
        raise ValueError("a row names a filter type PNG does not define")
    return header, rows, kinds


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a complete, intact PNG (every check of :func:`_whole`), else None.

    For sources that copy frames byte for byte: that catches truncated files, flipped bits and
    broken streams at the cost of one inflate, without unfiltering or building pixels; a PNG with
    other chunks than IHDR, IDAT and IEND is decoded by Pillow as well, which refuses a malformed one.
    """
    try:
        header, _, kinds = _whole(data)
        if kinds:  # chunks beyond the image's own: Pillow parses them and refuses a malformed one
            pillow_frame(data, ("PNG",))
    except ValueError:
        return None
    return header[0], header[1]


def frame_mode_size(data: bytes) -> tuple[str, tuple[int, int]] | None:
    """(Pillow's mode, (width, height)) of a PNG frame of the plain kind :func:`decode_png` reads
    without Pillow (8-bit grey, RGB or RGBA, not interlaced, no other chunk), checked
    whole in one inflate (:func:`_whole`) without building an image. A PNG that is not whole
    raises ValueError saying what is broken, whatever its kind; a whole PNG of another kind (any
    chunk beyond IHDR, IDAT and IEND included: Pillow parses those), or an image that is not a PNG,
    gives None (ask Pillow)."""
    if data[:8] != SIGNATURE:
        return None
    (w, h, depth, colour, _, _, interlace), _, kinds = _whole(data)
    if depth != 8 or colour not in MODES or interlace or kinds:
        return None
    return MODES[colour], (w, h)


def frame_defect(data: bytes, formats: tuple[str, ...], want: tuple[str, tuple[int, int]]) -> str | None:
    """What is wrong with a frame against its game's (mode, (width, height)), as ``validate --images``
    says it, or None: a PNG checked whole in one inflate, anything else decoded by Pillow as the
    ``formats`` its name says."""
    try:
        got = frame_mode_size(data) if formats == ("PNG",) else None
        if got is None:  # not a PNG, or a whole PNG of another kind: Pillow decodes it
            im = pillow_frame(data, formats)
            got = im.mode, im.size
    except ValueError as e:  # what pillow_frame and the PNG checks say
        return f"does not decode ({e})"
    except Exception as e:  # noqa: BLE001 - any decoder failure is a defect of the frame
        return f"does not decode ({type(e).__name__}: {e})"
    got_mode, (got_w, got_h) = got
    if (got_mode, (got_w, got_h)) != want:
        return f"is {got_mode} {got_h}x{got_w}, {expected_frame(want)}"
    return None


def is_intact(data: bytes, size: tuple[int, int] | None = None, formats: tuple[str, ...] = FRAME_FORMATS) -> bool:
    """Whether ``data`` is, in one of ``formats``, a whole JPEG or an intact PNG (every check of
    :func:`png_size`), of ``size`` (width, height) when given; one inflate for a plain PNG, a JPEG's
    header for its size."""
    if data[:3] == b"\xff\xd8\xff":
        if "JPEG" not in formats or data.rstrip(b"\x00")[-2:] != b"\xff\xd9":
            return False
        if size is None:
            return True
        try:
            with Image.open(io.BytesIO(data), formats=("JPEG",)) as im:  # the header alone
                return im.size == size
        except Exception:  # noqa: BLE001 - a header Pillow cannot read is not intact
            return False
    got = png_size(data) if "PNG" in formats else None
    return got is not None and (size is None or got == size)
