"""Checkpoints: a directory that restores exactly the policy that was saved.

    CKPT/
      vlm_agent_config.json   image_size, preprocess (gpu|processor), image_interpolation, frames,
                              temperatures, backbone and revision, head layout
      backbone/               the Idefics3 backbone (config.json, model.safetensors) and its tokenizer
      head.safetensors        question-type embedding, head transformer, scorer
      training.json           how it was trained (data, sources, games, steps, settings), when known

The reference CNN (backbone ``cnn``) keeps its weights in ``cnn.safetensors`` instead of ``backbone/`` and
``head.safetensors``.

A config without the preprocessing keys means 512 through the processor, and a CNN's without
``cnn_inputs`` each frame as its own channel (older checkpoints).
"""

from __future__ import annotations

import json
import re
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from safetensors.torch import load_file, save_file

from atari_data.errors import cache_hint, cut_off
from atari_data.layout import FolderPin, remove, set_aside, staged, swap_into_place
from atari_data.publish.repo import HUB_REF_RE
from laya_policy.backbone import download_hint, load_pretrained
from laya_policy.cnn import NatureCNN
from laya_policy.imageprep import INTERPOLATIONS
from laya_policy.model import ChoicePolicy
from laya_policy.presets import CNN, FRAMES, INPUTS, MOTION, PRESETS, check_size
from laya_protocol.errors import cause, signals_held
from laya_protocol.files import Refused, parse_json, read_capped, writing

CONFIG = "vlm_agent_config.json"
FINAL = "final"  # the checkpoint a training run leaves in its folder
BEST = "best"  # the checkpoint of its best evaluation, beside it


@dataclass
class AgentConfig:
    image_size: int = 512
    preprocess: str = "processor"
    image_interpolation: str = "lanczos2"
    frames: int = 2
    temperatures: dict = field(default_factory=lambda: {"choice": 1.0})
    backbone: str = "tiny"
    revision: str | None = None
    question_types: int = 1
    head_layers: int = 2
    cnn_inputs: str = MOTION  # the reference CNN's input channels (laya_policy.presets.INPUTS); a VLM does not use it


TEMPERATURES = (1e-3, 1e3)  # the choice temperature a checkpoint may carry: beyond it softmax under- or overflows
TRAINING = "training.json"  # how the checkpoint was trained (data, steps, settings): for its model card
HEAD, BACKBONE = "head.safetensors", "backbone"  # a VLM's head weights, and its backbone's folder
CNN_WEIGHTS = f"{CNN}.safetensors"  # the reference CNN's weights, in its head and backbone's place

#: A Hub snapshot's own files beside a checkpoint's: its card and git's attributes.
HUB_FILES = ("README.md", ".gitattributes")
#: The files a backbone folder holds, as transformers' save_pretrained names them (the model, its
#: tokenizer and its processor): any other name is a stray, which push would share (a key, a .env).
_BACKBONE_FILE = re.compile(
    r"(config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|vocab"
    r"|processor_config|preprocessor_config|chat_template|model\.safetensors\.index)\.json"
    r"|model(-\d{5}-of-\d{5})?\.safetensors|merges\.txt|chat_template\.jinja"
)


@contextmanager
def _no_library_bars() -> Iterator[None]:
    """transformers' "Writing model shards" / "Loading weights" bars, at every evaluation's save and
    every load (laya-eval's included), are noise in a run's log; the library's setting is restored."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:  # transformers' own switch back on; the Hub client's stays off where its variable says so
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Cannot enable progress bars")
                logging.enable_progress_bar()


def save_checkpoint(
    policy: ChoicePolicy | NatureCNN, cfg: AgentConfig, path: str | Path, training: dict | None = None
) -> Path:
    """Write the checkpoint beside ``path`` and rename it into place; what is there is replaced only
    if it is a checkpoint (or a link, removed itself): a folder of a user's, named best, is not."""
    path = Path(path)
    replaceable(path)
    from safetensors import SafetensorError  # how safetensors reports a failed write (a full disk)

    with staged(path.with_name(f".{path.name}.tmp")) as tmp, writing(path, foreign=(SafetensorError,)):
        remove(tmp)  # a link there is removed itself, never followed
        tmp.mkdir(parents=True)
        if isinstance(policy, NatureCNN):
            save_file({k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}, tmp / CNN_WEIGHTS)
        else:
            with _no_library_bars():
                policy.backbone.save_pretrained(tmp / BACKBONE)
            processor(policy, cfg).save_pretrained(tmp / BACKBONE)  # tokenizer, chat template, image processor
            head = {
                k: v.detach().contiguous().cpu()
                for k, v in policy.state_dict().items()
                if not k.startswith("backbone.")
            }
            save_file(head, tmp / HEAD)
        (tmp / CONFIG).write_text(json.dumps(asdict(cfg), indent=2) + "\n")
        if training is not None:
            (tmp / TRAINING).write_text(json.dumps(training, indent=2) + "\n")
        with signals_held():  # a stop between its two renames would leave no checkpoint here
            swap_into_place(tmp, path)  # a reader meets the old folder or the new one (load_whole)
    return path


def replaceable(path: Path) -> None:
    """Refuse to write a checkpoint over what is not one (a link is removed itself, never followed)."""
    if path.exists() and not path.is_symlink() and not (path / CONFIG).is_file():
        raise ValueError(f"{path}: is not a checkpoint, and is not replaced by one: move it, or give another --out")


def processor(policy: ChoicePolicy, cfg: AgentConfig):
    """The Idefics3 processor that reads the checkpoint's inputs as the policy does (SmolVLM's LANCZOS
    to a longest edge of 2048, then ``image_size``; no splitting), so ``AutoProcessor`` loads ``backbone/``."""
    from transformers import Idefics3Processor

    from laya_policy.imageprep import smolvlm_image_processor

    return Idefics3Processor(
        image_processor=smolvlm_image_processor(cfg.image_size),
        tokenizer=policy.tokenizer,
        image_seq_len=policy.image_tokens,
        chat_template=getattr(policy.tokenizer, "chat_template", None),
    )


def on_hub(backbone: str, said: bool | None = None) -> bool:
    """Whether a backbone's name is the Hub id it was loaded from: ``said`` by the training.json of
    the checkpoint that holds it, where it says; else a name of the Hub's form that is no folder here.
    A preset, the CNN and a local copy's path are not (a card names no base model for them)."""
    if backbone in PRESETS or backbone == CNN or not HUB_REF_RE.match(backbone):
        return False
    return said if isinstance(said, bool) else not Path(backbone).exists()


def resolve_checkpoint(spec: str | Path) -> Path:
    """A checkpoint folder: ``spec`` itself when it exists, else ``ORG/NAME[@REVISION]`` from the Hub
    (``snapshot_download``; offline, the local Hub cache)."""
    path = Path(spec)
    if path.exists():
        return path
    m = HUB_REF_RE.match(str(spec))
    if not m:
        raise FileNotFoundError(f"{spec}: no such checkpoint folder (nor a Hub id ORG/NAME[@REVISION])")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        wanted = sorted({*parts(cnn=True), *parts(cnn=False)})  # the repo's strays are not fetched
        return Path(snapshot_download(m[1], revision=m[2], allow_patterns=wanted))
    except RevisionNotFoundError:  # the Hub answered: no download elsewhere would find it
        raise OSError(f"{spec}: the Hub has no revision {m[2]!r} of {m[1]}") from None
    except RepositoryNotFoundError:  # a private one is not found either, without its owner's token
        raise OSError(f"{spec}: no repository {m[1]} on the Hub (a private one needs `hf auth login`)") from None
    except Exception as e:  # noqa: BLE001 - offline and not cached, network: one line each
        if broken := cut_off(e):
            raise OSError(f"{spec}: {broken}") from None
        raise OSError(
            f"{spec}: not a local folder, and the Hub checkpoint cannot be fetched ({type(e).__name__}); "
            f"download it where the Hub is reachable ({download_hint(str(spec))}) and pass DIR"
        ) from None


JSON_MAX = 1 << 20  # a checkpoint's JSON files are a few KB


def read_json_file(file: Path):
    """A checkpoint's JSON file, read as every package reads a file a user hands it
    (:mod:`laya_protocol.files`); any defect is one ValueError."""
    try:
        return parse_json(read_capped(file, JSON_MAX))
    except Refused as e:
        if e.size is not None:
            raise ValueError(
                f"{file}: is {e.size:,} bytes; a checkpoint's JSON is at most {JSON_MAX >> 20} MB"
            ) from None
        raise ValueError(f"{file}: is not a checkpoint's JSON ({e})") from None
    except OSError as e:
        raise ValueError(f"{file}: cannot be read ({e.strerror or type(e).__name__})") from None


FILE_MAX = 64 << 20  # any other file but weights: SmolVLM's tokenizer.json, the largest, is 3.5 MB


def check_files(path: Path) -> None:
    """Every file of a checkpoint is a regular one (a FIFO would hold open() forever, a device read on
    without end) and, weights aside, of a sane size, checked before transformers reads any of them."""
    for p in sorted(path.rglob("*")):  # links to files are followed: a Hub snapshot is links into its blobs
        if p.is_dir() and p.is_symlink():  # rglob would not enter it: its files would go unchecked
            raise ValueError(f"{p}: is a link to a folder; a checkpoint's folders are its own")
        if p.is_dir():
            continue
        if not p.is_file():
            raise ValueError(f"{p}: is not a regular file (a FIFO, a device or a dangling link?)")
        size = p.stat().st_size
        if p.suffix != ".safetensors" and size > FILE_MAX:
            raise ValueError(f"{p}: is {size:,} bytes; a checkpoint's file other than weights is at most 64 MB")


def parts(cnn: bool) -> tuple[str, ...]:
    """The files a checkpoint is made of, by its kind: its config and training.json, then the CNN's
    weights, or a VLM's head and the files of its backbone/ folder (``BACKBONE/*``)."""
    return (CONFIG, TRAINING, *((CNN_WEIGHTS,) if cnn else (HEAD, f"{BACKBONE}/*")))


def checkpoint_files(path: Path, strict: bool = True, cnn: bool | None = None) -> list[Path]:
    """The files of the checkpoint in ``path`` (:func:`parts`; a backbone file named as transformers
    names one, in backbone/ itself). A Hub snapshot's card and .gitattributes, and the .cache/ that
    ``hf download --local-dir`` keeps, are not the checkpoint's and are passed over. Anything else is,
    when ``strict`` (what push shares), refused on one line naming it: a stray would be shared with the
    checkpoint (a 70 MB one, a .git/ folder); so is a link, but a Hub snapshot's into its own blobs.
    Not ``strict`` (what a player fingerprints), strays are passed over and links followed. ``cnn``,
    when the caller has read the config already, says its kind."""
    if cnn is None:
        cnn = load_config(path).backbone == CNN
    own = parts(cnn)
    blobs = (path.parent.parent / "blobs").resolve() if path.parent.name == "snapshots" else None
    files = []
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if rel.parts[:2] in ((".cache",), (".cache", "huggingface")) or (rel.as_posix() in HUB_FILES and p.is_file()):
            continue
        if strict and p.is_symlink() and not (blobs and p.resolve().is_relative_to(blobs)):
            raise ValueError(f"{p}: is a symlink; a checkpoint to share holds plain files only")
        if p.is_dir() and rel.as_posix() == BACKBONE and not cnn:
            continue
        inside = len(rel.parts) == 2 and f"{rel.parts[0]}/*" in own and _BACKBONE_FILE.fullmatch(rel.name)
        if p.is_file() and (rel.as_posix() in own or inside):
            files.append(p)
        elif strict:
            kind = "the CNN's" if cnn else "a VLM's"
            raise ValueError(
                f"{p}: is not part of a checkpoint ({kind} are {', '.join(own)}); move it out of the folder"
            )
    return files


def fingerprint(path: Path) -> str:
    """A checkpoint's identity across machines: SHA-256 over its files' names and bytes, but for what
    says how it was made and not what it plays (training.json, and the config's backbone name and
    revision, which push rewrites where they are a local path). laya-eval records it with a run's
    results, so push can tell a checkpoint's results from another's at the same path or Hub id."""
    import hashlib

    digest = hashlib.sha256()
    cnn = load_config(path).backbone == CNN
    for p in checkpoint_files(path, strict=False, cnn=cnn):
        rel = p.relative_to(path).as_posix()
        if rel == TRAINING:
            continue
        digest.update(rel.encode() + b"\0")
        if rel == CONFIG:
            raw = read_json_file(p)
            kept = {k: v for k, v in raw.items() if k not in ("backbone", "revision")} | {"cnn": cnn}
            digest.update(json.dumps(kept, sort_keys=True).encode())
        else:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def checkpoint_folder(spec: str | Path) -> Path:
    """The folder :func:`resolve_checkpoint` finds, refused unless it holds a checkpoint's config (a
    training run's folder: the error names the checkpoint inside it)."""
    path = resolve_checkpoint(spec)
    if not (path / CONFIG).is_file():
        inside = f"; the run's checkpoint is {path / FINAL}" if (path / FINAL / CONFIG).is_file() else ""
        raise FileNotFoundError(f"{path} is not a laya-policy checkpoint (no {CONFIG}){inside}")
    return path


def load_config(path: str | Path) -> AgentConfig:
    file = checkpoint_folder(path) / CONFIG
    raw = read_json_file(file)
    if not isinstance(raw, dict):
        raise ValueError(f"{file}: holds a JSON {type(raw).__name__}, expected an object")
    raw.setdefault("preprocess", "processor")  # older checkpoints: 512 through the processor
    raw.setdefault("image_size", 512)
    raw.setdefault("cnn_inputs", FRAMES)  # CNN checkpoints from before the motion channel
    if unknown := sorted(set(raw) - set(AgentConfig.__dataclass_fields__)):  # no version wrote another key
        raise ValueError(
            f"{file}: {unknown[0]}: is not a setting of a checkpoint (a typo, or a newer laya-policy's?); "
            f"known: {', '.join(AgentConfig.__dataclass_fields__)}"
        )
    cfg = AgentConfig(**raw)
    for name, kind in (
        ("image_size", int),
        ("frames", int),
        ("question_types", int),
        ("head_layers", int),
        ("preprocess", str),
        ("backbone", str),
        ("cnn_inputs", str),
        ("image_interpolation", str),
        ("temperatures", dict),
    ):
        if not isinstance(getattr(cfg, name), kind) or isinstance(getattr(cfg, name), bool):
            raise ValueError(f"{file}: {name}: {getattr(cfg, name)!r} is not a {kind.__name__}")
    if cfg.revision is not None and not isinstance(cfg.revision, str):
        raise ValueError(f"{file}: revision: {cfg.revision!r} is not a string or null")
    if cfg.image_interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"{file}: image_interpolation {cfg.image_interpolation!r}: expected one of {', '.join(INTERPOLATIONS)}"
        )
    choice = cfg.temperatures.get("choice", 1.0)
    # 0 would give NaN probabilities and a negative one would play the least likely move: refused, not played
    if not (
        isinstance(choice, (int, float))
        and not isinstance(choice, bool)
        and TEMPERATURES[0] <= choice <= TEMPERATURES[1]
    ):
        raise ValueError(
            f"{file}: temperatures.choice: {str(choice)[:40]!r} is not a number "
            f"from {TEMPERATURES[0]:g} to {TEMPERATURES[1]:g}"
        )
    if not (1 <= cfg.question_types <= 64 and 1 <= cfg.head_layers <= 16):  # checked before a layer is built
        raise ValueError(
            f"{file}: question_types {cfg.question_types}, head_layers {cfg.head_layers}: expected 1..64 and 1..16"
        )
    if cfg.frames not in (1, 2) or not 16 <= cfg.image_size <= 4096 or cfg.preprocess not in ("gpu", "processor"):
        raise ValueError(
            f"{file}: frames {cfg.frames}, image_size {cfg.image_size}, preprocess {cfg.preprocess!r}: "
            "expected frames 1 or 2, image_size 16..4096, preprocess gpu or processor"
        )
    if cfg.cnn_inputs not in INPUTS:
        raise ValueError(f"{file}: cnn_inputs {cfg.cnn_inputs!r}: expected one of {', '.join(INPUTS)}")
    if cfg.backbone == CNN:  # checked before a layer is built
        check_size(cfg.image_size, f"{file}: image_size")
    return cfg


#: Reads of a checkpoint that a training run replaced meanwhile, before a load gives up.
READS = 10


def load_whole(spec: str | Path, device="cpu") -> tuple[Path, ChoicePolicy | NatureCNN, AgentConfig, str]:
    """(folder, model, config, fingerprint) of one and the same checkpoint. A training run replaces
    its ``best/`` (when an evaluation improves on it) and ``final/`` (at its end) whole, by
    save_checkpoint, while a player may be loading one: a read that met the swap is done again, so no
    one plays one checkpoint's config with the other's weights, nor records the other's fingerprint."""
    local = Path(spec)

    def mid_swap() -> bool:  # between save_checkpoint's two renames: the old one set aside
        return not local.exists() and set_aside(local).exists()

    for attempt in range(READS):
        if attempt:
            time.sleep(0.05 * attempt)
        if mid_swap():  # before checkpoint_folder, which would take a missing ORG/NAME for a Hub id
            continue
        try:
            folder = checkpoint_folder(spec)  # a Hub id: its snapshot, which nothing swaps
            pin = FolderPin(folder)
        except OSError:
            if mid_swap():
                continue
            raise
        try:
            model, cfg = load_checkpoint(folder, device)
            said = fingerprint(folder)
            whole = pin.same()  # asked while the folder is held open: no later one can have its inode
        except (OSError, ValueError) as e:
            if not pin.same():
                continue
            if hint := cache_hint(str(folder)):  # the hint first: a judge's one line is cut at 200
                raise ValueError(f"{spec}: does not load, and {hint} ({e})") from None
            raise
        finally:
            pin.close()
        if whole:
            return folder, model, cfg, said
    if mid_swap():
        raise FileNotFoundError(
            f"{spec}: is missing, and {set_aside(local)} holds the checkpoint it replaced (a run stopped "
            "between the two renames of its save?): move that folder back to load it"
        )
    raise ValueError(
        f"{spec}: was replaced while it was read, {READS} times; load it once the run writing it has ended"
    )


def load_checkpoint(path: str | Path, device="cpu") -> tuple[ChoicePolicy | NatureCNN, AgentConfig]:
    path = checkpoint_folder(path)
    check_files(path)
    cfg = load_config(path)
    if cfg.backbone == CNN:
        return _load_cnn(path, cfg).to(device).eval(), cfg
    if not (path / BACKBONE).is_dir():  # or its name, no folder here, would be asked of the Hub
        raise ValueError(f"{path / BACKBONE}: no such folder; a VLM checkpoint holds its backbone there")
    backbone_dtypes_problem(path / BACKBONE)
    with _no_library_bars():  # safetensors and JSON only, so nothing in the folder runs; one line a defect
        backbone, tokenizer = load_pretrained(str(path / BACKBONE))
    try:
        head = load_file(path / HEAD)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own kinds for a cut or lying file
        raise ValueError(f"{path / HEAD}: is not a loadable head ({cause(e)})") from None
    weights_problem(path / HEAD, head)
    if bad := next((n for n, p in backbone.named_parameters() if not p.isfinite().all()), None):
        raise ValueError(f"{path / BACKBONE}: {bad}: holds NaN or infinite weights")
    try:
        policy = ChoicePolicy(backbone, tokenizer, question_types=cfg.question_types, head_layers=cfg.head_layers)
        missing, unexpected = policy.load_state_dict(head, strict=False)
    except Exception as e:  # noqa: BLE001 - transformers, tokenizers and torch raise many kinds
        raise ValueError(f"{path}: is not a loadable laya-policy checkpoint ({cause(e)})") from None
    vision = getattr(backbone.config.vision_config, "image_size", None)
    if vision != cfg.image_size:  # the vision tower's position table fits one size: refused now, not at play
        raise ValueError(f"{path / CONFIG}: image_size {cfg.image_size}: its backbone's vision tower takes {vision}")
    missing = [k for k in missing if not k.startswith("backbone.")]
    if missing or unexpected:
        raise ValueError(f"{path / HEAD} does not fit the head (missing {missing}, unexpected {unexpected})")
    return policy.to(device).eval(), cfg


def _load_cnn(path: Path, cfg: AgentConfig) -> NatureCNN:
    try:
        weights = load_file(path / CNN_WEIGHTS)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own kinds for a cut or lying file
        raise ValueError(f"{path}: is not a loadable laya-policy CNN checkpoint ({cause(e)})") from None
    weights_problem(path / CNN_WEIGHTS, weights)
    try:
        model = NatureCNN(cfg.frames, cfg.image_size, cfg.cnn_inputs)
        model.load_state_dict(weights)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds; any defect is one line
        raise ValueError(f"{path}: is not a loadable laya-policy CNN checkpoint ({cause(e)})") from None
    return model


#: safetensors' names of what a backbone's weights may be stored as: float32 as save_checkpoint writes
#: them, bfloat16 or float16 as the Hub's copies are (loaded as float32 either way)
FLOAT_DTYPES = ("F32", "BF16", "F16")


def backbone_dtypes_problem(folder: Path) -> None:
    """Refuse a backbone weight stored as anything but a float (int32 of the same bytes was cast to
    float32 and played), naming the file and the tensor; read from the files' headers alone."""
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, "pt") as f:
                stored = {k: f.get_slice(k).get_dtype() for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - safetensors raises its own kinds for a cut or lying file
            raise ValueError(f"{file}: is not a loadable backbone file ({cause(e)})") from None
        if bad := next((k for k, d in stored.items() if d not in FLOAT_DTYPES), None):
            raise ValueError(f"{file}: {bad}: is {stored[bad]}, not floating-point weights")


def weights_problem(file: Path, weights: dict) -> None:
    """Refuse what save_checkpoint never writes, naming the file and the tensor: weights other than
    float32 (int32 of the same bytes were cast and played), or NaN and infinite ones (blamed on the
    learning rate at a run's first step, and on the policy's probabilities in play)."""
    import torch

    for name, t in weights.items():
        if t.dtype != torch.float32:
            raise ValueError(f"{file}: {name}: is {str(t.dtype).removeprefix('torch.')}, not float32 weights")
        if not t.isfinite().all():
            raise ValueError(f"{file}: {name}: holds NaN or infinite weights")
