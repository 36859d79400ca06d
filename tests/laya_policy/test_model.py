import numpy as np
import torch

from atari_data.schema.questions import atari_question
from laya_policy.backbone import build_backbone, image_tokens
from laya_policy.imageprep import ImagePrep
from laya_policy.model import ChoicePolicy
from laya_policy.presets import PRESET_IMAGE_SIZE
from laya_protocol.games import minimal_actions


def policy():
    backbone, tokenizer = build_backbone("tiny", image_size=128, seed=0)
    return ChoicePolicy(backbone, tokenizer)


def questions(*games):
    return [atari_question(g, minimal_actions(g))["action"] for g in games]


def test_tiny_backbone_is_offline_and_has_the_right_token_count():
    backbone, tokenizer = build_backbone("tiny")  # at the frame side train gives a preset by default
    assert image_tokens(backbone) == (PRESET_IMAGE_SIZE // 16) ** 2 // 4**2 == 4
    assert image_tokens(build_backbone("tiny", image_size=512)[0]) == 64  # (512 / 16)^2 / 4^2
    assert tokenizer.decode(tokenizer("- FIRE: shoot\n").input_ids) == "- FIRE: shoot\n"


def test_sequence_layout_and_option_positions():
    p = policy()
    enc = p.encode(questions("Breakout", "Pong"), n_images=2)
    assert enc.image_pos.shape == (2, 2 * p.image_tokens)
    assert (enc.input_ids.gather(1, enc.image_pos) == p._image).all()
    assert enc.option_mask.sum(1).tolist() == [4, 6]
    for b in range(2):
        pos = enc.option_pos[b][enc.option_mask[b]]
        assert (enc.input_ids[b, pos] == p._newline).all(), "each option is read at its own newline token"
        assert pos.tolist() == sorted(pos.tolist())
    shuffled = p.encode(questions("Breakout"), n_images=1, orders=[[2, 0, 3, 1]])
    pos = shuffled.option_pos[0, :4].tolist()
    assert pos[2] < pos[0] < pos[3] < pos[1], "option k is scored where it is shown"
    q = questions("Breakout")[0]
    for k, key in enumerate(q["criteria"]):
        line = shuffled.input_ids[0, shuffled.option_start[0, k] : shuffled.option_pos[0, k]]
        assert p.tokenizer.decode(line) == f"- {key}: {q['criteria'][key]}", "option words are the option's own line"


def test_option_words_are_the_mean_embedding_of_each_line_whatever_the_order():
    p = policy()
    q = questions("Breakout")
    embed = p.backbone.get_input_embeddings()
    plain, shuffled = p.encode(q, n_images=1), p.encode(q, n_images=1, orders=[[3, 1, 0, 2]])
    words = p._option_words(embed(plain.input_ids), plain)
    assert torch.allclose(words, p._option_words(embed(shuffled.input_ids), shuffled), atol=1e-6)
    line = plain.input_ids[0, plain.option_start[0, 2] : plain.option_pos[0, 2]]
    assert torch.allclose(words[0, 2], embed(line).mean(0), atol=1e-6)
    assert not torch.allclose(words[0, 0], words[0, 1])


def test_forward_scores_every_option_pads_with_minus_inf_and_learns():
    p = policy()
    frames = np.random.default_rng(0).integers(0, 256, (4, 210, 160, 3), dtype=np.uint8)
    pixels = ImagePrep(128, "gpu")(frames)
    feats = p.encode_images(pixels).reshape(2, 2, p.image_tokens, -1)  # 2 decisions x [prev, current]
    enc = p.encode(questions("Breakout", "Pong"), n_images=2)
    logits = p(feats, enc)
    assert logits.shape == (2, 6) and torch.isinf(logits[0, 4:]).all() and torch.isfinite(logits[1]).all()
    target = torch.tensor([1, 5])
    opt = torch.optim.AdamW(p.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        feats = p.encode_images(pixels).reshape(2, 2, p.image_tokens, -1)
        loss = torch.nn.functional.cross_entropy(p(feats, enc), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5, losses


def test_a_local_copy_in_the_upstream_layout_loads_and_the_hub_offline_is_a_clear_error(tmp_path, monkeypatch):
    import pytest

    backbone, tokenizer = build_backbone("tiny", image_size=128)
    backbone.save_pretrained(tmp_path / "smolvlm")  # config.json + model.safetensors, as on the Hub
    tokenizer.save_pretrained(tmp_path / "smolvlm")
    loaded, tok = build_backbone(str(tmp_path / "smolvlm"))
    assert type(loaded).__name__ == "Idefics3Model" and len(tok) == len(tokenizer)
    for name, p in backbone.state_dict().items():
        assert torch.equal(p, loaded.state_dict()[name])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match=r"hf download HuggingFaceTB/SmolVLM-256M-Instruct --local-dir DIR"):
        build_backbone("HuggingFaceTB/SmolVLM-256M-Instruct")
