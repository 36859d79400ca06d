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
a small bidirectional transformer over the language model's last hidden states at the image tokens
(each with a learned embedding of its place: frame slot and screen position) and at each option's
terminating newline, plus a learned question-type embedding. An option's score is read at its
newline: LayerNorm -> Linear -> GELU -> Linear, plus the dot product of a query with a summary of
the screen (every image token squeezed to a few features and concatenated, so the summary keeps
where things are). The query projects the option's state and the mean input embedding of the
option line's own tokens (what the option says, whatever its place in the list). Padded option
slots score -inf, so one model serves any number of options. The question text comes from
``atari_data.schema.questions``; nothing here words it.

Why the screen summary: a "which button, given where the target is" decision is a product of the
option and the target's place. Read only through the transformer and a per-option MLP, a randomly
initialised model (the ``tiny`` preset) found no such product on ViZDoom basic within 3,000 steps
and settled on equal scores; with the dot product and the option's words it learns it in a few
hundred (without the words it still settles on equal scores).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from atari_data.schema.questions import format_option

NEG_INF = float("-inf")
MAX_FRAMES = 2  # image slots the head has places for (the current screen takes the last)
SUMMARY_FEATURES = 32  # per image token, in the screen summary
#: The turn markers of a prompt without a chat template (the tiny preset's), and an option's line.
USER, ASSISTANT = "User:", "\nAssistant:"


def option_line(key: str, text: str) -> str:
    return "- " + format_option(key, text)


@dataclass
class Encoded:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor | None  # [B, T]; None when no row is padded
    image_pos: torch.Tensor  # [B, n_images * image_tokens] positions of the image tokens, in order
    option_pos: torch.Tensor  # [B, K] position of each option's newline (0 where padded)
    option_start: torch.Tensor  # [B, K] position of each option line's first token (0 where padded)
    option_mask: torch.Tensor  # [B, K] bool


class ChoicePolicy(nn.Module):
    def __init__(self, backbone, tokenizer, question_types: int = 1, head_layers: int = 2):
        super().__init__()
        self.backbone, self.tokenizer = backbone, tokenizer
        hidden = backbone.config.text_config.hidden_size
        self.type_embedding = nn.Embedding(question_types, hidden)
        # no dropout: on ViZDoom basic 0.1 kept even a frozen-feature head at equal scores
        layer = nn.TransformerEncoderLayer(
            hidden,
            nhead=max(1, hidden // 64),
            dim_feedforward=2 * hidden,
            dropout=0.0,
            batch_first=True,
            norm_first=True,
        )
        self.head = nn.TransformerEncoder(layer, head_layers, enable_nested_tensor=False)
        self.score = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.option_query = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden))
        self.option_words = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden))
        self._text_ids: dict[str, list[int]] = {}  # text -> its token ids
        self._prompt_ids: dict[tuple[str, int], list[int]] = {}  # (instructions, images) -> the prompt's
        ids = tokenizer.convert_tokens_to_ids
        self._image, self._around, self._global = ids("<image>"), ids("<fake_token_around_image>"), ids("<global-img>")
        self._end = ids("<end_of_utterance>")
        self._newline = tokenizer("\n", add_special_tokens=False).input_ids[-1]
        v = backbone.config.vision_config
        self.image_tokens = (v.image_size // v.patch_size) ** 2 // backbone.config.scale_factor**2
        # Where each image token sits (frame slot, place on the screen): the head's attention has no order
        # of its own. Small at first, as a new token embedding would be; at unit scale it drowned the states.
        self.image_position = nn.Parameter(0.02 * torch.randn(MAX_FRAMES, self.image_tokens, hidden))
        self.image_squeeze = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, SUMMARY_FEATURES))
        self.screen_summary = nn.Sequential(
            nn.Linear(MAX_FRAMES * self.image_tokens * SUMMARY_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, hidden)
        )

    # -- text ----------------------------------------------------------------------------------------
    def _text(self, s: str) -> list[int]:
        """Token ids of ``s`` (a fresh list), tokenised once: the same question and option lines
        come back every step, and tokenising them was a tenth of a CPU training step."""
        if s not in self._text_ids:
            self._text_ids[s] = self.tokenizer(s, add_special_tokens=False).input_ids
        return list(self._text_ids[s])

    def encode(self, questions: list[dict], n_images: int, orders: list[list[int]] | None = None) -> Encoded:
        """Token sequences for a batch of questions (the inner ``atari_question(...)["action"]`` dicts);
        ``orders[b]`` lists the option indices in the order they are shown (identity by default)."""
        rows, positions = [], []
        for b, q in enumerate(questions):
            keys = list(q["criteria"])
            order = orders[b] if orders is not None else list(range(len(keys)))
            ids = self._prompt(q["instructions"], n_images)
            pos, start = [0] * len(keys), [0] * len(keys)
            for k in order:
                start[k] = len(ids)
                ids += self._text(option_line(keys[k], q["criteria"][keys[k]])) + [self._newline]
                pos[k] = len(ids) - 1
            rows.append(ids)
            positions.append((pos, start))
        t, k = max(map(len, rows)), max(len(p) for p, _ in positions)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(rows), t), pad, dtype=torch.long)
        attention = torch.zeros((len(rows), t), dtype=torch.long)
        option_pos = torch.zeros((len(rows), k), dtype=torch.long)
        option_start = torch.zeros((len(rows), k), dtype=torch.long)
        option_mask = torch.zeros((len(rows), k), dtype=torch.bool)
        for b, (ids, (pos, start)) in enumerate(zip(rows, positions, strict=True)):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            attention[b, : len(ids)] = 1
            option_pos[b, : len(pos)] = torch.tensor(pos)
            option_start[b, : len(pos)] = torch.tensor(start)
            option_mask[b, : len(pos)] = True
        image_pos = (input_ids == self._image).nonzero()[:, 1].reshape(len(rows), -1)
        return Encoded(input_ids, attention, image_pos, option_pos, option_start, option_mask)

    def _prompt(self, instructions: str, n_images: int) -> list[int]:
        """The user turn and the assistant's opening: the backbone's own chat template when its tokenizer
        has one (SmolVLM: ``<|im_start|>User:<images><instructions><end_of_utterance>\\nAssistant:``), else
        ``User:<images><instructions><end_of_utterance>\\nAssistant:``; then a newline, the options follow.
        Each ``<image>`` becomes the image block the Idefics3 processor writes for an unsplit image."""
        key = (instructions, n_images)
        if key not in self._prompt_ids:
            self._prompt_ids[key] = self._tokenise_prompt(instructions, n_images)
        return list(self._prompt_ids[key])

    def _tokenise_prompt(self, instructions: str, n_images: int) -> list[int]:
        image = [self._around, self._global] + [self._image] * self.image_tokens + [self._around]
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            content = [{"type": "image"}] * n_images + [{"type": "text", "text": instructions}]
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = USER + "<image>" * n_images + instructions + "<end_of_utterance>" + ASSISTANT
        pieces = (text + "\n").split("<image>")
        ids = self._text(pieces[0])
        for piece in pieces[1:]:
            ids += image + self._text(piece)
        return ids

    @staticmethod
    def to_device(enc: Encoded, device) -> Encoded:
        moved = {f: getattr(enc, f) for f in Encoded.__dataclass_fields__}
        return dataclasses.replace(enc, **{f: t.to(device) for f, t in moved.items() if t is not None})

    # -- vision --------------------------------------------------------------------------------------
    def encode_images(self, pixel_values: torch.Tensor, train_vision: bool = True) -> torch.Tensor:
        """Vision tower + connector: normalised pixels [n, 3, S, S] -> features [n, image_tokens, hidden].

        With ``train_vision`` off the tower runs without gradients and the connector with them (it is
        trained either way). Not ``get_image_features``: that drops images whose pixels are all 0.0 (its
        padding), which a mid-grey screen is, and runs the connector inside any no-grad block around it.
        """
        vision = self.backbone.vision_model
        pixel_values = pixel_values.to(next(vision.parameters()).dtype)
        with torch.set_grad_enabled(train_vision and torch.is_grad_enabled()):
            states = vision(pixel_values=pixel_values).last_hidden_state
        return self.backbone.connector(states)

    @staticmethod
    def _option_words(embed: torch.Tensor, enc: Encoded) -> torch.Tensor:
        """Mean input embedding of each option line's tokens [B, K, hidden]: what the option says, whatever
        comes before it (a random language model's state at the newline is mostly the context)."""
        device = embed.device
        csum = torch.nn.functional.pad(embed.float().cumsum(1), (0, 0, 1, 0))  # csum[:, i] = sum of tokens < i
        end, start = enc.option_pos.to(device), enc.option_start.to(device)
        h = embed.shape[-1]
        total = torch.gather(csum, 1, end[..., None].expand(-1, -1, h)) - torch.gather(
            csum, 1, start[..., None].expand(-1, -1, h)
        )
        return total / (end - start).clamp(min=1)[..., None]

    # -- scoring -------------------------------------------------------------------------------------
    def forward(self, image_features: torch.Tensor, enc: Encoded, question_type: torch.Tensor | None = None):
        """Option logits [B, K] from image features [B, n_images, image_tokens, hidden] (oldest first)."""
        device = image_features.device
        b, n_img = len(enc.input_ids), image_features.shape[1] * image_features.shape[2]
        embed = self.backbone.get_input_embeddings()(enc.input_ids.to(device))
        h = embed.shape[-1]
        words = self._option_words(embed, enc)
        img_pos = enc.image_pos.to(device)
        # scatter, not masked_scatter: no data-dependent shapes, so the decision can be a CUDA graph
        embed = embed.scatter(
            1, img_pos[..., None].expand(-1, -1, h), image_features.reshape(b, n_img, h).to(embed.dtype)
        )
        attention = enc.attention_mask.to(device) if enc.attention_mask is not None else None  # None: no padding
        hidden = self.backbone.text_model(inputs_embeds=embed, attention_mask=attention).last_hidden_state
        # The head reads the image tokens and the option newlines only: attention spread over the whole
        # question would dilute the few image positions ~20x, and the question is already in each
        # option's state through the causal language model.
        option_mask = enc.option_mask.to(device)
        pos = torch.cat([img_pos, enc.option_pos.to(device)], 1)
        x = torch.gather(hidden, 1, pos[..., None].expand(-1, -1, h))
        frames = image_features.shape[1]
        screen = x[:, :n_img] + self.image_position[MAX_FRAMES - frames :].reshape(1, n_img, h).to(x.dtype)
        squeezed = self.image_squeeze(screen).reshape(b, frames, -1)
        if frames < MAX_FRAMES:  # a one-frame model leaves the older slots empty
            squeezed = torch.cat([squeezed.new_zeros(b, MAX_FRAMES - frames, squeezed.shape[-1]), squeezed], 1)
        summary = self.screen_summary(squeezed.flatten(1))
        qt = question_type if question_type is not None else torch.zeros(b, dtype=torch.long, device=device)
        pad = torch.cat([torch.zeros_like(img_pos, dtype=torch.bool), ~option_mask], 1)
        x = self.head(torch.cat([screen, x[:, n_img:]], 1) + self.type_embedding(qt)[:, None], src_key_padding_mask=pad)
        options = x[:, n_img:]
        query = self.option_query(options) + self.option_words(words.to(options.dtype))
        scores = self.score(options).squeeze(-1) + (query * summary[:, None]).sum(-1) / h**0.5
        return scores.masked_fill(~option_mask, NEG_INF)
