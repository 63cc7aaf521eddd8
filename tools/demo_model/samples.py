"""Scene items -> model inputs through transformers' own Qwen3-VL processor, and batching.

One item becomes the processor's output for the chat prompt (user turn + generation prompt:
``input_ids`` with expanded placeholders, ``mm_token_type_ids``, ``pixel_values`` /
``image_grid_thw`` or ``pixel_values_videos`` / ``video_grid_thw``) followed by the answer's
tokens and ``<|im_end|>``; only those last tokens carry a label. Greedy decoding is exactly
right iff, with the true prefix fed in, the argmax at every labelled position is the label
(induction over the answer) — :func:`exact_matches` measures that in one forward pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.video_utils import VideoMetadata

from tools.demo_model.scenes import KINDS, PLURALS, VIDEO_FPS, Episode, Item, token_labels

IGNORE = -100


@dataclass(frozen=True)
class Sample:
    """One encoded item: processor outputs for the prompt, then the answer tokens."""

    task: str
    prompt_ids: torch.Tensor          # [P] int64
    mm_token_type_ids: torch.Tensor   # [P] int64
    answer_ids: tuple[int, ...]       # answer tokens + <|im_end|>
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    pixel_values_videos: torch.Tensor | None
    video_grid_thw: torch.Tensor | None

    @property
    def length(self) -> int:
        return int(self.prompt_ids.shape[0]) + len(self.answer_ids)


def processor_call(item: Item, processor: Any) -> dict[str, Any]:
    """The keyword arguments of ``processor(...)`` for the prompt of ``item``."""
    text = processor.apply_chat_template(item.hf_messages(), tokenize=False,
                                         add_generation_prompt=True)
    call: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if item.media == "video":
        call["videos"] = [list(item.images)]
        call["video_metadata"] = [VideoMetadata(total_num_frames=len(item.images),
                                                fps=VIDEO_FPS)]
        call["cap_pixels_per_frame"] = False  # the 5.24 default, stated to silence its warning
    else:
        call["images"] = list(item.images)
    return call


def encode(item: Item, processor: Any, im_end: int) -> Sample:
    inputs = processor(**processor_call(item, processor))
    answer = processor.tokenizer.encode(item.answer, add_special_tokens=False)
    return Sample(item.task, inputs["input_ids"][0], inputs["mm_token_type_ids"][0],
                  (*answer, im_end), inputs.get("pixel_values"), inputs.get("image_grid_thw"),
                  inputs.get("pixel_values_videos"), inputs.get("video_grid_thw"))


def collate(samples: Sequence[Sample], pad_id: int) -> tuple[dict[str, torch.Tensor],
                                                               torch.Tensor]:
    """Right-padded model inputs and labels ([B, L], IGNORE outside the answers)."""
    length = max(s.length for s in samples)
    batch = len(samples)
    ids = torch.full((batch, length), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, length), dtype=torch.long)
    mm = torch.zeros((batch, length), dtype=torch.long)
    labels = torch.full((batch, length), IGNORE, dtype=torch.long)
    for b, s in enumerate(samples):
        p = int(s.prompt_ids.shape[0])
        answer = torch.tensor(s.answer_ids, dtype=torch.long)
        ids[b, :p] = s.prompt_ids
        ids[b, p:s.length] = answer
        mask[b, :s.length] = 1
        mm[b, :p] = s.mm_token_type_ids
        labels[b, p:s.length] = answer
    inputs: dict[str, torch.Tensor] = {"input_ids": ids, "attention_mask": mask,
                                       "mm_token_type_ids": mm}
    images = [s for s in samples if s.pixel_values is not None]
    if images:
        inputs["pixel_values"] = torch.cat([s.pixel_values for s in images])  # type: ignore[misc]
        inputs["image_grid_thw"] = torch.cat([s.image_grid_thw for s in images])  # type: ignore[misc]
    videos = [s for s in samples if s.pixel_values_videos is not None]
    if videos:
        inputs["pixel_values_videos"] = torch.cat(
            [s.pixel_values_videos for s in videos])  # type: ignore[misc]
        inputs["video_grid_thw"] = torch.cat([s.video_grid_thw for s in videos])  # type: ignore[misc]
    return inputs, labels


def length_batches(samples: Sequence[Sample], batch_size: int) -> Iterator[list[Sample]]:
    """Batches of similar length (less padding), in a fixed order."""
    ordered = sorted(samples, key=lambda s: s.length)
    for start in range(0, len(ordered), batch_size):
        yield ordered[start:start + batch_size]


def shifted(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at position t predict the label at t+1."""
    return logits[:, :-1], labels[:, 1:]


def exact_matches(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B] bool: every answer token (and the final <|im_end|>) is the argmax."""
    pred, target = shifted(logits, labels)
    wrong = (pred.argmax(-1) != target) & (target != IGNORE)
    return ~wrong.any(dim=1)


# --------------------------------------------------------------------------- packed episodes
#
# Training packs every question about one scene behind one copy of the media: the row is
# ``prefix`` (the user turn up to the last <|vision_end|>) followed by one branch per question
# (question text, "<|im_end|>\n<|im_start|>assistant\n", answer, <|im_end|>). A 4-D attention
# mask lets each branch see the prefix and itself only, and each branch gets the positions it
# has in its own single-question prompt, so every branch computes exactly what the
# single-question forward computes (``check_packing`` verifies it) while the ViT and the
# prefix run once.

PREFIX, PAD = -1, -2


@dataclass(frozen=True)
class PackedSample:
    prefix_ids: torch.Tensor                                      # [P] int64
    prefix_mm: torch.Tensor                                       # [P] int64
    branches: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # (question ids, answer ids)
    tasks: tuple[str, ...]
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    pixel_values_videos: torch.Tensor | None
    video_grid_thw: torch.Tensor | None
    vision_labels: torch.Tensor | None = None  # [image tokens, 3] kind, colour, slot
    kind_marks: tuple[tuple[int, int, int], ...] = ()  # (branch, token in branch, class)

    @property
    def length(self) -> int:
        return int(self.prefix_ids.shape[0]) + sum(len(q) + len(a) for q, a in self.branches)


class BranchTokens:
    """Token ids of a question branch (the chat template's text after the media) and of an
    answer, memoised: the task texts come from a small set."""

    def __init__(self, processor: Any, im_end: int) -> None:
        self.processor = processor
        self.im_end = im_end
        self._questions: dict[tuple[str, int, str], tuple[int, ...]] = {}
        self._answers: dict[str, tuple[int, ...]] = {}

    def question(self, item: Item) -> tuple[int, ...]:
        key = (item.media, len(item.images), item.prompt)
        if key not in self._questions:
            text = self.processor.apply_chat_template(item.hf_messages(), tokenize=False,
                                                      add_generation_prompt=True)
            self._questions[key] = tuple(self.processor.tokenizer.encode(
                text.rsplit("<|vision_end|>", 1)[1], add_special_tokens=False))
        return self._questions[key]

    def answer(self, text: str) -> tuple[int, ...]:
        if text not in self._answers:
            ids = self.processor.tokenizer.encode(text, add_special_tokens=False)
            self._answers[text] = (*ids, self.im_end)
        return self._answers[text]

    def json_branch(self, item: Item, text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(question ids + the ``{``, the rest of the JSON answer + <|im_end|>): the ``{``
        the grammar forces is prompt, not label (``json_answers``)."""
        brace, rest = split_brace(self.processor.tokenizer, text)
        return (*self.question(item), brace), (*rest, self.im_end)


def split_brace(tokenizer: Any, text: str) -> tuple[int, tuple[int, ...]]:
    """The ``{`` token and the tokens of the rest of a JSON answer, checked to be the
    tokenization of the whole text."""
    whole = tokenizer.encode(text, add_special_tokens=False)
    brace = tokenizer.convert_tokens_to_ids("{")
    rest = tokenizer.encode(text[1:], add_special_tokens=False)
    if not text.startswith("{") or whole != [brace, *rest]:
        raise RuntimeError(f"{text!r} does not tokenize as '{{' + the rest")
    return brace, tuple(rest)


def encode_json(item: Item, text: str, processor: Any, im_end: int) -> Sample:
    """``item`` answered with the one-field JSON ``text``, for validation: what the grammar
    forces (``{"key":``) ends the prompt, so only the value, ``}`` and <|im_end|> are
    scored — a schema's key is the user's, not the model's to guess."""
    plain = encode(item, processor, im_end)
    tokenizer = processor.tokenizer
    whole = tokenizer.encode(text, add_special_tokens=False)
    forced = text[:text.index('":') + 2]
    cut = next(k for k in range(1, len(whole) + 1)
               if len(tokenizer.decode(whole[:k])) >= len(forced))
    if tokenizer.decode(whole[:cut]) != forced:
        raise RuntimeError(f"{text!r}: no token boundary after the key")
    head = torch.tensor(whole[:cut], dtype=plain.prompt_ids.dtype)
    return Sample(item.task + "_json", torch.cat([plain.prompt_ids, head]),
                  torch.cat([plain.mm_token_type_ids, torch.zeros_like(head)]),
                  (*whole[cut:], im_end), plain.pixel_values, plain.image_grid_thw,
                  plain.pixel_values_videos, plain.video_grid_thw)


def encode_episode(episode: Episode, processor: Any, im_end: int,
                   branch_tokens: BranchTokens | None = None,
                   json_twins: Sequence[tuple[int, str]] = ()) -> PackedSample:
    """One packed row: the media once, then a branch per question, then a branch per JSON
    twin ``(question index, JSON answer)`` (``json_answers``)."""
    tokens = branch_tokens or BranchTokens(processor, im_end)
    vision_end = processor.tokenizer.convert_tokens_to_ids("<|vision_end|>")
    first = encode(episode.item(0), processor, im_end)
    ids = first.prompt_ids
    cut = int((ids == vision_end).nonzero().max()) + 1
    branches = []
    marks = []
    for k in range(len(episode.questions)):
        item = episode.item(k)
        question = tokens.question(item)
        if k == 0 and question != tuple(ids[cut:].tolist()):
            raise RuntimeError("the question tokens differ from the processor's")
        branches.append((question, tokens.answer(item.answer)))
        mark = kind_mark(episode, item.prompt, question, tokens)
        if mark is not None:
            marks.append((k, *mark))
    for k, text in json_twins:
        branches.append(tokens.json_branch(episode.item(k), text))
    tasks = (*(q[0] for q in episode.questions),
             *(episode.questions[k][0] + "_json" for k, _ in json_twins))
    return PackedSample(ids[:cut], first.mm_token_type_ids[:cut], tuple(branches),
                        tasks, first.pixel_values,
                        first.image_grid_thw, first.pixel_values_videos, first.video_grid_thw,
                        vision_labels(episode, first.image_grid_thw), tuple(marks))


_KIND_WORDS = {**{k: k for k in KINDS}, **{PLURALS.get(k, k + "s"): k for k in KINDS}}


def kind_mark(episode: Episode, prompt: str, question: tuple[int, ...],
              tokens: BranchTokens) -> tuple[int, int] | None:
    """For a question naming a kind: (the index of the kind word's last token in the
    question, the class the trainer's question probe predicts there) — the count of that
    kind in the image (0-3), or for two images 4 / 5 if the first / second has it."""
    words = prompt.rstrip("?").split()
    found = [(i, w) for i, w in enumerate(words) if w in _KIND_WORDS]
    if not found or not episode.scenes:
        return None
    i, word = found[0]
    kind = _KIND_WORDS[word]
    if len(episode.scenes) == 2:
        label = 4 if kind in episode.scenes[0].kinds() else 5
    else:
        label = episode.scenes[0].kinds().count(kind)
    prefix = tokens.processor.tokenizer.encode(" ".join(words[:i + 1]),
                                               add_special_tokens=False)
    if tuple(prefix) != question[:len(prefix)]:
        raise RuntimeError(f"cannot find the kind word of {prompt!r} in its tokens")
    return len(prefix) - 1, label


def vision_labels(episode: Episode, grid_thw: torch.Tensor | None) -> torch.Tensor | None:
    """Per merged image token (the merger's row order: t, then rows, then columns of 2x2
    blocks), the (kind, colour) class of the object in its slot; ``None`` for a clip."""
    if grid_thw is None or len(episode.scenes) != grid_thw.shape[0]:
        return None
    rows = []
    for scene, (t, h, w) in zip(episode.scenes, grid_thw.tolist(), strict=True):
        columns = w // 2
        slots = [min(2, (6 * c + 3) // (2 * columns)) for c in range(columns)] * (h // 2)
        rows += [(k, c, s) for (k, c), s in
                 zip(token_labels(scene, h // 2, columns), slots, strict=True)] * t
    return torch.tensor(rows, dtype=torch.long)


def collate_packed(samples: Sequence[PackedSample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded rows plus what :func:`packed_layout` needs: ``branch`` [B, L] (PREFIX,
    PAD or the branch number), ``offset`` [B, L] (index inside the branch), ``prefix_len``."""
    length = max(s.length for s in samples)
    batch = len(samples)
    ids = torch.full((batch, length), pad_id, dtype=torch.long)
    mm = torch.zeros((batch, length), dtype=torch.long)
    labels = torch.full((batch, length), IGNORE, dtype=torch.long)
    branch = torch.full((batch, length), PAD, dtype=torch.long)
    offset = torch.zeros((batch, length), dtype=torch.long)
    prefix_len = torch.zeros(batch, dtype=torch.long)
    for b, s in enumerate(samples):
        p = int(s.prefix_ids.shape[0])
        ids[b, :p], mm[b, :p], branch[b, :p], prefix_len[b] = s.prefix_ids, s.prefix_mm, PREFIX, p
        at = p
        for k, (question, answer) in enumerate(s.branches):
            n = len(question) + len(answer)
            ids[b, at:at + n] = torch.tensor(question + answer)
            labels[b, at + len(question):at + n] = torch.tensor(answer)
            branch[b, at:at + n] = k
            offset[b, at:at + n] = torch.arange(n)
            at += n
    out: dict[str, torch.Tensor] = {"input_ids": ids, "mm_token_type_ids": mm,
                                    "labels": labels, "branch": branch, "offset": offset,
                                    "prefix_len": prefix_len}
    marks = []  # (row, position, class) of each kind word
    for b, s in enumerate(samples):
        starts = [int(s.prefix_ids.shape[0])]
        for question, answer in s.branches:
            starts.append(starts[-1] + len(question) + len(answer))
        marks += [(b, starts[k] + at, label) for k, at, label in s.kind_marks]
    out["kind_marks"] = torch.tensor(marks, dtype=torch.long).reshape(-1, 3)
    for key in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
        parts = [getattr(s, key) for s in samples if getattr(s, key) is not None]
        if parts:
            out[key] = torch.cat(parts)
    if "image_grid_thw" in out:  # aligned with the merger's image rows; IGNORE if unknown
        out["vision_labels"] = torch.cat([
            s.vision_labels if s.vision_labels is not None else
            torch.full((int(s.image_grid_thw.prod(-1).sum()) // 4, 3), IGNORE)
            for s in samples if s.image_grid_thw is not None])
    return out


def packed_layout(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                       torch.Tensor]:
    """3-axis position ids [3, B, L] (transformers' ``get_rope_index`` for the prefix, text
    positions continuing it for every branch) and the boolean attention mask [B, 1, L, L]."""
    branch, offset, prefix_len = batch["branch"], batch["offset"], batch["prefix_len"]
    p_max = int(prefix_len.max())
    prefix_mask = (branch[:, :p_max] == PREFIX).long()
    prefix_pos, _ = model.model.get_rope_index(
        batch["input_ids"][:, :p_max], batch["mm_token_type_ids"][:, :p_max],
        image_grid_thw=batch.get("image_grid_thw"), video_grid_thw=batch.get("video_grid_thw"),
        attention_mask=prefix_mask)
    rows = torch.arange(branch.shape[0])
    last = prefix_pos[0, rows, prefix_len - 1]                       # [B], a text token
    positions = (last[:, None] + 1 + offset).expand(3, -1, -1).clone()
    positions[:, :, :p_max] = torch.where(prefix_mask.bool(), prefix_pos, positions[:, :, :p_max])
    length = branch.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    same = branch[:, :, None] == branch[:, None, :]
    to_prefix = (branch == PREFIX)[:, None, :]
    pad_row = (branch == PAD)[:, :, None]
    mask = causal & (same | to_prefix) & ~pad_row
    mask |= pad_row & torch.eye(length, dtype=torch.bool)           # no empty rows
    return positions, mask[:, None]


def packed_forward(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    positions, mask = packed_layout(model, batch)
    inputs = {k: v for k, v in batch.items()
              if k not in ("labels", "branch", "offset", "prefix_len", "vision_labels",
                           "kind_marks")}
    return model(**inputs, attention_mask=mask, position_ids=positions).logits
