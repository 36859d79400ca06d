"""Backbones: SmolVLM-256M (Idefics3) from the Hub or a local copy, or a tiny random one built here.

The ``tiny`` preset is an Idefics3 configuration small enough to train on a laptop CPU, with
random weights and a byte-level tokenizer built in code: everything runs offline, in tests too.
It keeps what matters for the pipeline: SigLIP patches of 16 pixels, 4x4 pixel shuffle, so 64
image tokens per 512x512 image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SMOLVLM = "HuggingFaceTB/SmolVLM-256M-Instruct"
SPECIAL_TOKENS = ["<pad>", "<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]


@dataclass(frozen=True)
class TinySize:
    image_size: int = 512
    vision_hidden: int = 64
    vision_layers: int = 2
    text_hidden: int = 128
    text_layers: int = 2
    heads: int = 4


def byte_tokenizer():
    """A byte-level tokenizer (256 byte tokens, no merges) with Idefics3's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    return fast


def tiny_config(tokenizer, size: TinySize = TinySize()):
    from transformers import Idefics3Config

    return Idefics3Config(
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=4,
        vision_config={"hidden_size": size.vision_hidden, "intermediate_size": 2 * size.vision_hidden,
                       "num_hidden_layers": size.vision_layers, "num_attention_heads": size.heads,
                       "image_size": size.image_size, "patch_size": 16},
        text_config={"model_type": "llama", "hidden_size": size.text_hidden, "intermediate_size": 2 * size.text_hidden,
                     "num_hidden_layers": size.text_layers, "num_attention_heads": size.heads,
                     "num_key_value_heads": size.heads, "vocab_size": len(tokenizer),
                     "max_position_embeddings": 2048, "pad_token_id": tokenizer.pad_token_id,
                     "tie_word_embeddings": True},
        tie_word_embeddings=True)


def build_backbone(name: str = "tiny", image_size: int = 512, seed: int = 0, revision: str | None = None):
    """(Idefics3Model, tokenizer). ``tiny``: random weights, built here; otherwise a Hub id or a local dir."""
    from transformers import AutoTokenizer, Idefics3Model

    if name == "tiny":
        tokenizer = byte_tokenizer()
        torch.manual_seed(seed)
        return Idefics3Model(tiny_config(tokenizer, TinySize(image_size=image_size))), tokenizer
    try:
        model = Idefics3Model.from_pretrained(name, revision=revision)
        tokenizer = AutoTokenizer.from_pretrained(name, revision=revision)
    except OSError as e:
        raise OSError(f"cannot load backbone {name!r} ({e}). Offline, download it once where the Hub is reachable "
                      f"(`hf download {name} --local-dir DIR`) and pass --model DIR") from None
    return model, tokenizer


def image_tokens(model) -> int:
    """Tokens per image: (image size / patch size)^2 / scale_factor^2."""
    v = model.config.vision_config
    return (v.image_size // v.patch_size) ** 2 // model.config.scale_factor ** 2
