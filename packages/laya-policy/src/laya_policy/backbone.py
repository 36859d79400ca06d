"""Backbones: SmolVLM-256M (Idefics3) from the Hub or a local copy, or a tiny random one built here.

The ``tiny`` preset is an Idefics3 configuration small enough to train on a laptop CPU, with
random weights and a small BPE tokenizer trained in code on the questions: everything runs offline, in tests too.
It keeps what matters for the pipeline: SigLIP patches of 16 pixels, 4x4 pixel shuffle, so 64
image tokens per 512x512 image.
"""

from __future__ import annotations

from pathlib import Path

import torch

from atari_data.errors import cut_off
from laya_policy.presets import PRESETS, TinySize
from laya_protocol.errors import cause

SPECIAL_TOKENS = ["<pad>", "<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]


def question_corpus() -> list[str]:
    """Every text a policy is shown: each ALE game's question with all 18 options, and the turn markers."""
    from atari_data.schema.questions import atari_question
    from laya_policy.model import ASSISTANT, USER, option_line
    from laya_protocol.games import FULL_ACTIONS, all_games

    texts = [USER, ASSISTANT + "\n"]
    for game in all_games():
        q = atari_question(game, FULL_ACTIONS)["action"]
        texts.append(q["instructions"])
        texts.extend(option_line(k, v) for k, v in q["criteria"].items())
    return texts


def tiny_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE tokenizer with Idefics3's special tokens, trained here on the question corpus.

    Any text still encodes (the 256 byte symbols are in the vocabulary), but the questions take a
    few tokens per phrase instead of one per byte: merges may cross spaces (``use_regex=False``), so
    a Boxing question with 18 options is 48 tokens, against ~700 bytes and 176 tokens when merges
    stopped at word ends. The language model's cost falls with the length: the quickstart's
    training ran at 130 samples/s against 59 with word-bounded merges (400 steps, one thread).
    Option lines are tokenised apart from each other and from the instructions (the model places
    their newlines itself), so a merge never joins two options. Training is deterministic.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(question_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    return fast


def tiny_config(tokenizer, size: TinySize = PRESETS["tiny"]):
    from transformers import Idefics3Config

    return Idefics3Config(
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=size.scale_factor,
        vision_config={
            "hidden_size": size.vision_hidden,
            "intermediate_size": size.vision_intermediate,
            "num_hidden_layers": size.vision_layers,
            "num_attention_heads": size.vision_heads,
            "image_size": size.image_size,
            "patch_size": size.patch_size,
        },
        text_config={
            "model_type": "llama",
            "hidden_size": size.text_hidden,
            "intermediate_size": size.text_intermediate,
            "num_hidden_layers": size.text_layers,
            "num_attention_heads": size.text_heads,
            "num_key_value_heads": size.text_kv_heads,
            "vocab_size": len(tokenizer),
            "max_position_embeddings": 2048,
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": True,
        },
        tie_word_embeddings=True,
    )


def build_backbone(name: str = "tiny", image_size: int | None = None, seed: int = 0):
    """(Idefics3Model, tokenizer). ``tiny`` or ``random-smolvlm``: random weights, built here (see
    PRESETS) for frames of ``image_size`` (by default the preset's, train's default); otherwise a Hub
    id ORG/NAME[@REVISION] or a local directory, whose own config says its size."""
    from dataclasses import replace

    from transformers import Idefics3Model

    if name in PRESETS:
        tokenizer = tiny_tokenizer()
        torch.manual_seed(seed)
        size = PRESETS[name] if image_size is None else replace(PRESETS[name], image_size=image_size)
        return Idefics3Model(tiny_config(tokenizer, size)), tokenizer
    return load_pretrained(name)


#: The most parameters a backbone's config.json may declare (12 GB of float32 weights), counted
#: before a layer is built: 3,000 layers took 3 GB and ran on without end.
MAX_PARAMETERS = 3_000_000_000
#: The one chat template a backbone may bring (SmolVLM's), or none: a template is code that runs
#: at load (jinja), and another one could loop for ever, ask for gigabytes or raise.
SMOLVLM_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
#: The config fields a layer's shape is made of, each a whole number from 1 to its most: a model
#: of the Hub's largest shapes fits (126 layers, 16,384 wide), a config of 3,000 layers does not.
_SIZES = {
    "": {"scale_factor": 64},
    "vision_config.": {
        "hidden_size": 1 << 14,
        "intermediate_size": 1 << 16,
        "num_hidden_layers": 256,
        "num_attention_heads": 1 << 10,
        "image_size": 4096,
        "patch_size": 4096,
    },
    "text_config.": {
        "hidden_size": 1 << 14,
        "intermediate_size": 1 << 16,
        "num_hidden_layers": 256,
        "num_attention_heads": 1 << 10,
        "vocab_size": 1 << 20,
    },
}


def declared_parameters(config) -> int:
    """About how many weights an Idefics3 config builds: each layer's projections and MLP, the
    embeddings, the connector."""
    v, t = config.vision_config, config.text_config
    vision = v.num_hidden_layers * (4 * v.hidden_size**2 + 2 * v.hidden_size * v.intermediate_size)
    vision += ((v.image_size // v.patch_size) ** 2 + 3 * v.patch_size**2) * v.hidden_size
    text = t.num_hidden_layers * (4 * t.hidden_size**2 + 3 * t.hidden_size * t.intermediate_size)
    text += t.vocab_size * t.hidden_size
    return vision + text + v.hidden_size * config.scale_factor**2 * t.hidden_size


def check_config(config, where: str) -> None:
    """A backbone config's shapes, bounded before anything is built; ValueError naming the field."""
    for prefix, fields in _SIZES.items():
        part = config if not prefix else getattr(config, prefix[:-1])
        for name, most in fields.items():
            value = getattr(part, name, None)
            if type(value) is not int or not 1 <= value <= most:
                raise ValueError(f"{where}: {prefix}{name}: {str(value)[:40]} is not a whole number from 1 to {most:,}")
    if (n := declared_parameters(config)) > MAX_PARAMETERS:
        raise ValueError(f"{where}: declares about {n:,} parameters, over the {MAX_PARAMETERS:,} laya-policy builds")


def hub_reference(name: str) -> tuple[str, str | None]:
    """(what transformers loads, its revision or None): a Hub id ORG/NAME@REVISION is split, a folder
    or any other name is left whole."""
    from pathlib import Path

    from atari_data.publish.repo import HUB_REF_RE

    m = None if Path(name).is_dir() else HUB_REF_RE.match(name)
    if m and m[2] and Path(m[1]).is_dir():  # transformers would load the folder and pass over the revision
        raise ValueError(f"--model {name}: {m[1]} is a folder here; a revision names a Hub repository's")
    return (m[1], m[2]) if m else (name, None)


def download_hint(name: str) -> str:
    """How to fetch a backbone once where the Hub is reachable, for an offline error."""
    repo, revision = hub_reference(name)
    return f"`hf download {repo}{f' --revision {revision}' if revision else ''} --local-dir DIR`"


def load_pretrained(name: str):
    """(Idefics3Model in float32, tokenizer) from a Hub id ORG/NAME[@REVISION] or a folder in the Hub's layout, read as
    untrusted: safetensors and JSON only (never the folder's own code), the config bounded before a
    layer is built, every weight present (a missing one was left random, and played), the chat
    template SmolVLM's or none. A defect is one ValueError; an unreachable one, OSError."""
    import warnings

    from transformers import AutoConfig, AutoTokenizer, Idefics3Model
    from transformers.utils import logging

    where, spec = f"backbone {name}", name
    name, revision = hub_reference(name)
    try:
        config = AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds for a config it cannot read
        if broken := cut_off(e):
            raise OSError(f"cannot load {where}: {broken}") from None
        if isinstance(e, OSError):
            fetch = (
                f". Offline, download it once where the Hub is reachable ({download_hint(spec)}) and pass --model DIR"
            )
            raise OSError(f"cannot load {where} ({cause(e)}){'' if Path(name).is_dir() else fetch}") from None
        raise ValueError(f"{where}: config.json: not an Idefics3 config ({cause(e)})") from None
    check_config(config, f"{where}/config.json")
    was = logging.get_verbosity()
    logging.set_verbosity_error()  # its load report is a table of many lines; the check below is one
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # float32 master weights whatever the file stores (the Hub's SmolVLM is bfloat16): AdamW updates
            # at 2e-5 vanish in bf16, and the float32 head could not take bf16 states. CUDA runs autocast.
            model, info = Idefics3Model.from_pretrained(  # the config checked above, not read again
                name,
                config=config,
                revision=revision,
                dtype=torch.float32,
                trust_remote_code=False,
                output_loading_info=True,  # with what loaded: missing keys are refused, not left random
            )
            tokenizer = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers, tokenizers and safetensors raise many kinds
        if broken := cut_off(e):
            raise OSError(f"cannot load {where}: {broken}") from None
        if isinstance(e, OSError):
            raise OSError(f"cannot load {where} ({cause(e)})") from None
        raise ValueError(f"{where}: is not a loadable backbone ({cause(e)})") from None
    finally:
        logging.set_verbosity(was)
    lacking = sorted(info["missing_keys"]) + sorted(k for k, *_ in info.get("mismatched_keys", []))
    if lacking:
        raise ValueError(f"{where}: its weights lack {len(lacking)} the config builds, e.g. {lacking[0]} (missing)")
    if tokenizer.pad_token_id is None:  # a batch of questions is padded with it
        raise ValueError(f"{where}: its tokenizer has no pad token (tokenizer_config.json: pad_token)")
    if (image := tokenizer.convert_tokens_to_ids("<image>")) != model.config.image_token_id:
        raise ValueError(
            f"{where}: config.json: image_token_id {model.config.image_token_id} is not its tokenizer's "
            f"<image> ({image})"
        )
    template = getattr(tokenizer, "chat_template", None)
    if template not in (None, SMOLVLM_CHAT_TEMPLATE):
        raise ValueError(
            f"{where}: its chat template is not SmolVLM's; laya-policy writes SmolVLM's prompt form only "
            "(a template is code that runs at load)"
        )
    return model, tokenizer


def pretrained_image_size(name: str) -> tuple[int, int]:
    """(image size, patch size) a pretrained backbone's vision tower was built for, read from its
    config without the weights."""
    from pathlib import Path

    from transformers import AutoConfig

    if name.startswith((".", "/")) and not Path(name).is_dir():
        raise OSError(f"--model {name}: no such folder")
    repo, revision = hub_reference(name)
    try:
        v = AutoConfig.from_pretrained(repo, revision=revision, trust_remote_code=False).vision_config
        return int(v.image_size), int(v.patch_size)
    except (OSError, ValueError, AttributeError) as e:
        if broken := cut_off(e):
            raise OSError(f"cannot read the config of backbone {name!r}: {broken}") from None
        raise OSError(
            f"cannot read the config of backbone {name!r} ({cause(e)}). "
            f"Offline, download it once ({download_hint(name)}) and pass --model DIR"
        ) from None


def image_tokens(model) -> int:
    """Tokens per image: (image size / patch size)^2 / scale_factor^2."""
    v = model.config.vision_config
    return (v.image_size // v.patch_size) ** 2 // model.config.scale_factor**2
