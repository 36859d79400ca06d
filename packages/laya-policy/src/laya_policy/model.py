"""The choice policy: an Idefics3 backbone reads the frames and the question; a small head scores
each option.

One sequence per decision::

    User:<img><img>...<instructions><end_of_utterance>
    Assistant:
    - NOOP: do nothing\\n
    - FIRE: press fire (launch the ball / shoot)\\n
    ...

Each image is ``<fake_token_around_image><global-img>`` + 64 ``<image>`` tokens +
``<fake_token_around_image>``, its tokens' embeddings replaced by the vision features. The head is
a small bidirectional transformer over the language model's last hidden states, plus a learned
question-type embedding; an option's score is read at its terminating newline token
(LayerNorm -> Linear -> GELU -> Linear). Padded option slots score -inf, so one model serves any
number of options. The question text comes from ``atari_data.questions``; nothing here words it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from atari_data.questions import format_option

NEG_INF = float("-inf")


@dataclass
class Encoded:
    input_ids: torch.Tensor       # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    image_mask: torch.Tensor      # [B, T] bool: where image features go, in order
    option_pos: torch.Tensor      # [B, K] position of each option's newline (0 where padded)
    option_mask: torch.Tensor     # [B, K] bool


class ChoicePolicy(nn.Module):
    def __init__(self, backbone, tokenizer, question_types: int = 1, head_layers: int = 2):
        super().__init__()
        self.backbone, self.tokenizer = backbone, tokenizer
        hidden = backbone.config.text_config.hidden_size
        self.type_embedding = nn.Embedding(question_types, hidden)
        layer = nn.TransformerEncoderLayer(hidden, nhead=max(1, hidden // 64), dim_feedforward=2 * hidden,
                                           batch_first=True, norm_first=True)
        self.head = nn.TransformerEncoder(layer, head_layers, enable_nested_tensor=False)
        self.score = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))
        ids = tokenizer.convert_tokens_to_ids
        self._image, self._around, self._global = ids("<image>"), ids("<fake_token_around_image>"), ids("<global-img>")
        self._end = ids("<end_of_utterance>")
        self._newline = tokenizer("\n", add_special_tokens=False).input_ids[-1]
        v = backbone.config.vision_config
        self.image_tokens = (v.image_size // v.patch_size) ** 2 // backbone.config.scale_factor ** 2

    # -- text ----------------------------------------------------------------------------------------
    def _text(self, s: str) -> list[int]:
        return self.tokenizer(s, add_special_tokens=False).input_ids

    def encode(self, questions: list[dict], n_images: int, orders: list[list[int]] | None = None) -> Encoded:
        """Token sequences for a batch of questions (the inner ``atari_question(...)["action"]`` dicts);
        ``orders[b]`` lists the option indices in the order they are shown (identity by default)."""
        image = [self._around, self._global] + [self._image] * self.image_tokens + [self._around]
        rows, positions = [], []
        for b, q in enumerate(questions):
            keys = list(q["criteria"])
            order = orders[b] if orders is not None else list(range(len(keys)))
            ids = self._text("User:") + image * n_images + self._text(q["instructions"]) + [self._end] + \
                self._text("\nAssistant:\n")
            pos = [0] * len(keys)
            for k in order:
                ids += self._text("- " + format_option(keys[k], q["criteria"][keys[k]])) + [self._newline]
                pos[k] = len(ids) - 1
            rows.append(ids)
            positions.append(pos)
        t, k = max(map(len, rows)), max(map(len, positions))
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(rows), t), pad, dtype=torch.long)
        attention = torch.zeros((len(rows), t), dtype=torch.long)
        option_pos = torch.zeros((len(rows), k), dtype=torch.long)
        option_mask = torch.zeros((len(rows), k), dtype=torch.bool)
        for b, (ids, pos) in enumerate(zip(rows, positions, strict=True)):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            attention[b, : len(ids)] = 1
            option_pos[b, : len(pos)] = torch.tensor(pos)
            option_mask[b, : len(pos)] = True
        return Encoded(input_ids, attention, input_ids == self._image, option_pos, option_mask)

    # -- vision --------------------------------------------------------------------------------------
    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Vision tower + connector: normalised pixels [n, 3, S, S] -> features [n, image_tokens, hidden]."""
        out = self.backbone.get_image_features(pixel_values[:, None])
        feats = out.pooler_output if hasattr(out, "pooler_output") else out
        return torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats

    # -- scoring -------------------------------------------------------------------------------------
    def forward(self, image_features: torch.Tensor, enc: Encoded, question_type: torch.Tensor | None = None):
        """Option logits [B, K] from image features [B, n_images, image_tokens, hidden] (oldest first)."""
        device = image_features.device
        embed = self.backbone.get_input_embeddings()(enc.input_ids.to(device))
        mask = enc.image_mask.to(device)
        embed = embed.masked_scatter(mask[..., None], image_features.reshape(-1, embed.shape[-1]).to(embed.dtype))
        attention = enc.attention_mask.to(device)
        hidden = self.backbone.text_model(inputs_embeds=embed, attention_mask=attention).last_hidden_state
        qt = question_type if question_type is not None else torch.zeros(len(hidden), dtype=torch.long, device=device)
        h = self.head(hidden + self.type_embedding(qt)[:, None], src_key_padding_mask=attention == 0)
        at = torch.gather(h, 1, enc.option_pos.to(device)[..., None].expand(-1, -1, h.shape[-1]))
        scores = self.score(at).squeeze(-1)
        return scores.masked_fill(~enc.option_mask.to(device), NEG_INF)
