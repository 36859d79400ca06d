"""Backbones: SmolVLM-256M (Idefics3) from the Hub or a local copy, or a tiny random one built here.

The ``tiny`` preset is an Idefics3 configuration small enough to train on a laptop CPU, with
random weights and a small BPE tokenizer trained in code on the questions: everything runs offline, in tests too.
It keeps what matters for the pipeline: SigLIP patches of 16 pixels, 4x4 pixel shuffle, so 64
image tokens per 512x512 image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from laya_protocol.errors import cause

SMOLVLM = "HuggingFaceTB/SmolVLM-256M-Instruct"
SPECIAL_TOKENS = ["<pad>", "<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]


@dataclass(frozen=True)
class TinySize:
    """The shapes of a random Idefics3 built here."""

    image_size: int = 512
    scale_factor: int = 4  # pixel shuffle: (image_size / 16)^2 / scale_factor^2 image tokens per frame
    vision_hidden: int = 64
    vision_layers: int = 2
    vision_heads: int = 4
    vision_intermediate: int = 128
    text_hidden: int = 128
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 4
    text_intermediate: int = 256


#: SmolVLM-256M's shapes (SigLIP base patch 16 at 512, a 30-layer 576-wide Llama) with random
#: weights: what GPU benchmarks time without downloading anything.
SMOLVLM_SHAPES = TinySize(
    vision_hidden=768,
    vision_layers=12,
    vision_heads=12,
    vision_intermediate=3072,
    text_hidden=576,
    text_layers=30,
    text_heads=9,
    text_kv_heads=3,
    text_intermediate=1536,
)
PRESETS = {"tiny": TinySize(), "random-smolvlm": SMOLVLM_SHAPES}


def question_corpus() -> list[str]:
    """Every text a policy is shown: each ALE game's question with all 18 options, and the turn markers."""
    from atari_data.schema.questions import atari_question, format_option
    from laya_protocol.games import FULL_ACTIONS, all_games

    texts = ["User:", "\nAssistant:\n"]
    for game in all_games():
        q = atari_question(game, FULL_ACTIONS)["action"]
        texts.append(q["instructions"])
        texts.extend("- " + format_option(k, v) for k, v in q["criteria"].items())
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


def tiny_config(tokenizer, size: TinySize = TinySize()):
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
            "patch_size": 16,
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


def build_backbone(name: str = "tiny", image_size: int = 512, seed: int = 0, revision: str | None = None):
    """(Idefics3Model, tokenizer). ``tiny`` or ``random-smolvlm``: random weights, built here (see
    PRESETS); otherwise a Hub id or a local directory."""
    from dataclasses import replace

    from transformers import AutoTokenizer, Idefics3Model

    if name in PRESETS:
        tokenizer = tiny_tokenizer()
        torch.manual_seed(seed)
        return Idefics3Model(tiny_config(tokenizer, replace(PRESETS[name], image_size=image_size))), tokenizer
    try:
        # float32 master weights whatever the file stores (the Hub's SmolVLM is bfloat16): AdamW updates
        # at 2e-5 vanish in bf16, and the float32 head could not take bf16 states. CUDA runs autocast.
        model = Idefics3Model.from_pretrained(  # trust_remote_code=False: never the folder's own code
            name, revision=revision or "main", dtype=torch.float32, trust_remote_code=False
        )
        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=False)
    except OSError as e:
        raise OSError(
            f"cannot load backbone {name!r} ({e}). Offline, download it once where the Hub is reachable "
            f"(`hf download {name} --local-dir DIR`) and pass --model DIR"
        ) from None
    return model, tokenizer


def pretrained_image_size(name: str, revision: str | None = None) -> tuple[int, int]:
    """(image size, patch size) a pretrained backbone's vision tower was built for, read from its
    config without the weights."""
    from pathlib import Path

    from transformers import AutoConfig

    if name.startswith((".", "/")) and not Path(name).is_dir():
        raise OSError(f"--model {name}: no such folder")
    try:
        v = AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=False).vision_config
        return int(v.image_size), int(v.patch_size)
    except (OSError, ValueError, AttributeError) as e:
        raise OSError(
            f"cannot read the config of backbone {name!r} ({cause(e)}). "
            f"Offline, download it once (`hf download {name} --local-dir DIR`) and pass --model DIR"
        ) from None


def image_tokens(model) -> int:
    """Tokens per image: (image size / patch size)^2 / scale_factor^2."""
    v = model.config.vision_config
    return (v.image_size // v.patch_size) ** 2 // model.config.scale_factor**2
