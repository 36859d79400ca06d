"""A random SmolVLM-256M-Instruct written exactly as the Hub stores it, for offline tests.

What matches the Hub copy: the architecture (``Idefics3ForConditionalGeneration``), the config
values that shape the computation (SigLIP patch 16 at 512 with hidden 768, 12 heads and 3072
intermediate; a Llama text model 576 wide with 9 heads, 3 KV heads and 1536 intermediate; scale
factor 4, so 64 image tokens), ``torch_dtype: bfloat16`` and every weight stored in bfloat16 in one
``model.safetensors`` under the Hub's parameter names (``model.vision_model.*``,
``model.connector.*``, ``model.text_model.*``, ``lm_head.weight``), a tokenizer with SmolVLM's
special tokens and chat template, and ``preprocessor_config.json`` / ``processor_config.json`` as
SmolVLM ships them (LANCZOS to a longest edge of 2048, then 512; image splitting on).

What differs, for speed, and says so in the config's ``_fixture`` note: 2 vision and 2 text
layers instead of 12 and 30, and a byte-level BPE vocabulary of about 1,100 trained here on the
questions instead of SmolVLM's 49,280.
"""

from __future__ import annotations

import json
from pathlib import Path

CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
] + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]

PREPROCESSOR = {
    "do_convert_rgb": True,
    "do_image_splitting": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Idefics3ImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 512},
    "processor_class": "Idefics3Processor",
    "resample": 1,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": 2048},
}


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from laya_policy.backbone import question_corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        show_progress=False,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(question_corpus() + ["User:", "Assistant:"], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    fast.add_special_tokens({"additional_special_tokens": SPECIAL[3:]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_smolvlm(folder: str | Path, seed: int = 0) -> Path:
    """Write the random SmolVLM copy into ``folder`` (created); returns it."""
    import torch
    from safetensors.torch import save_file
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer()
    config = Idefics3Config(
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=4,
        tie_word_embeddings=False,
        vision_config={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 2,
            "num_attention_heads": 12,
            "image_size": 512,
            "patch_size": 16,
            "model_type": "idefics3_vision",
        },
        text_config={
            "model_type": "llama",
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 2,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "head_dim": 64,
            "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
            "max_position_embeddings": 8192,
            "vocab_size": len(tok),
            "pad_token_id": tok.pad_token_id,
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "tie_word_embeddings": False,
        },
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    raw = json.loads(config.to_json_string())
    raw.update(
        architectures=["Idefics3ForConditionalGeneration"],
        torch_dtype="bfloat16",
        _fixture="random weights; 2+2 layers and a ~1k vocabulary instead of 12+30 and 49,280",
    )
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    tok.save_pretrained(folder)
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}) + "\n")
    (folder / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (folder / "processor_config.json").write_text(
        json.dumps({"image_seq_len": 64, "processor_class": "Idefics3Processor"}) + "\n"
    )
    return folder


def checkpoint_logits(ckpt: str | Path) -> list[float]:
    """Pong option logits of a checkpoint on two fixed random screens: the same in any process (on one
    thread: how a float sum is split between threads changes its last bits)."""
    import numpy as np
    import torch

    from atari_data.schema.questions import atari_question
    from laya_policy.checkpoint import load_checkpoint
    from laya_policy.imageprep import ImagePrep
    from laya_protocol.games import minimal_actions

    torch.set_num_threads(1)
    model, cfg = load_checkpoint(ckpt)
    frames = np.random.default_rng(0).integers(0, 256, (2, 210, 160, 3), dtype=np.uint8)
    with torch.no_grad():
        feats = model.encode_images(ImagePrep(cfg.image_size, cfg.preprocess)(frames))[None]
        q = atari_question("Pong", minimal_actions("Pong"))["action"]
        return model(feats, model.encode([q], 2))[0].tolist()
