#!/usr/bin/env python3
"""Train edgevlm's demo model: a tiny Qwen3-VL that answers questions about synthetic scenes.

The model is transformers' ``Qwen3VLForConditionalGeneration`` (architecture and shape in
``checkpoint.py``), fed by transformers' own Qwen3-VL processor (PIL image path, smart_resize
with the model's pixel bounds, the real chat template and placeholder expansion). Training
items come from ``scenes.py`` (split seed ``TRAIN_SEED``), rendered on the fly by a data worker
process, so no item is ever repeated; batches are grouped by length to cut padding. AdamW with
a linear warmup and a cosine decay, loss on the answer tokens (and the closing ``<|im_end|>``)
only, everything seeded.

Every ``--eval-every`` steps the validation split (``VALIDATION_SEED``) is scored: the share
of items whose greedy answer would be exactly right (see ``samples.exact_matches``). Training
stops at ``--target`` validation accuracy, at ``--max-steps``, or when the wall-clock budget
is spent; the weights with the best validation accuracy are saved as a float32 Hugging Face
checkpoint (``--hf-out``) and converted with ``edgevlm convert`` into ``--out``
(``model.gguf`` + ``mmproj.gguf``). The held-out test split (``TEST_SEED``) is never touched
here: ``evaluate.py`` reports on it.

Usage (from the repository root, with the ``reference`` and ``convert`` extras installed):
``python tools/demo_model/train.py`` then ``python tools/demo_model/train.py --stage json``
(the defaults of each stage are the recipe of the committed model; the second stage teaches
one-field JSON answers, see ``json_answers.py``).
"""

from __future__ import annotations

import os

# Under load (a shared machine) busy-waiting OpenMP threads slow small ops down a hundredfold.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import copy
import json
import logging
import math
import resource
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from tools.demo_model import checkpoint  # noqa: E402
from tools.demo_model.json_answers import JSON_SEED, json_answer  # noqa: E402
from tools.demo_model.samples import (  # noqa: E402
    IGNORE,
    BranchTokens,
    Sample,
    collate,
    collate_packed,
    encode,
    encode_episode,
    encode_json,
    exact_matches,
    length_batches,
    packed_forward,
    shifted,
)
from tools.demo_model.scenes import (  # noqa: E402
    TRAIN_SEED,
    VALIDATION_SEED,
    Episode,
    make_episode,
    make_item,
)

logger = logging.getLogger("train_demo_model")

DEFAULT_OUT = REPO / "daemon" / "edgevlm" / "models" / checkpoint.MODEL_NAME
DEFAULT_HF_OUT = REPO / "tests" / "e2e" / "fixtures" / checkpoint.MODEL_NAME


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    batch_size: int = 24           # episodes (one scene or clip, several questions each)
    questions: int = 3             # questions per single-image episode
    lr: float = 2e-3
    min_lr_ratio: float = 0.05
    warmup_steps: int = 40
    max_steps: int = 1800          # the cosine schedule's length
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_items: int = 200
    target: float = 0.97           # validation accuracy that ends training early
    budget_cpu_minutes: float = 52.0  # CPU time of all processes (2 cores: ~26 min wall)
    budget_wall_minutes: float = 0.0  # 0: no wall-clock limit (a shared machine is slower)
    threads: int = 2
    pool_batches: int = 4          # batches drawn at once and regrouped by length
    curriculum_steps: int = 200    # single images start with one object, then 1-3 by here
    vision_lr_scale: float = 1.0   # the ViT and mergers learn at lr * this
    aux_weight: float = 1.0        # weight of the auxiliary vision loss (0: off)
    question_aux_weight: float = 0.5  # weight of the question probe's loss (0: off)
    question_probe_layer: int = 1  # the decoder layer whose output the question probe reads
    # The second stage (JSON answers, ``json_answers.py``): start from a trained checkpoint,
    # give this share of the questions a JSON twin, and leave the ViT as it is.
    init: str = ""                 # a Hugging Face checkpoint directory to start from
    json_share: float = 0.0        # share of questions that also get a JSON answer branch
    freeze_vision: int = 0         # 1: the ViT and mergers do not learn (mmproj.gguf unchanged)


def use_linear_patch_embedding(model: Any) -> None:
    """Train the ViT's patch embedding as the linear map it is.

    ``Conv3d(kernel = stride = (2, 16, 16))`` on the ``[N, 3, 2, 16, 16]`` view of
    ``pixel_values`` is ``pixel_values @ W.reshape(C, 1536).T + b`` (spec qwen3vl.md §4.1);
    the same weights, the same result to rounding, but the CPU convolution's backward is
    several times slower than a matrix product's. The saved checkpoint is unchanged.
    """
    embed = model.model.visual.patch_embed

    def forward(hidden_states: torch.Tensor) -> torch.Tensor:
        weight = embed.proj.weight
        return torch.nn.functional.linear(hidden_states.to(weight.dtype),
                                          weight.reshape(weight.shape[0], -1), embed.proj.bias)

    embed.forward = forward


class VisionProbe(torch.nn.Module):
    """Training-only auxiliary loss: from each merged image token (the merger's output, the
    rows that replace the image placeholders), classify the kind and the colour of the
    object standing in that token's third of the picture (``scenes.slot_labels``). It gives
    the ViT a dense signal from the first step, where the language loss alone reaches it only
    through attention the decoder has not learnt yet. Not part of the saved model."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        from tools.demo_model.scenes import COLOURS, KINDS

        width = model.config.text_config.hidden_size
        self.kind = torch.nn.Linear(width, 1 + len(KINDS))
        self.colour = torch.nn.Linear(width, 1 + len(COLOURS))
        self.slot = torch.nn.Linear(width, 3)
        self.outputs: list[torch.Tensor] = []
        model.model.visual.merger.register_forward_hook(
            lambda m, _i, out: self.outputs.append(out) if self.training and m.training else None)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Call after the forward: the first merger call of a batch is its images'."""
        outputs, self.outputs = self.outputs, []
        labels = batch.get("vision_labels")
        if labels is None or not outputs:
            return torch.zeros(())
        tokens = outputs[0]
        if tokens.shape[0] != labels.shape[0]:
            raise RuntimeError(f"{tokens.shape[0]} image tokens, {labels.shape[0]} labels")
        ce = torch.nn.functional.cross_entropy
        return (ce(self.kind(tokens), labels[:, 0], ignore_index=IGNORE)
                + ce(self.colour(tokens), labels[:, 1], ignore_index=IGNORE)
                + ce(self.slot(tokens), labels[:, 2], ignore_index=IGNORE))


class QuestionProbe(torch.nn.Module):
    """Training-only auxiliary loss on the decoder: at the kind word of a question ("Is there
    a *cat*?"), the output of an early decoder layer must tell how many of that kind the
    image shows (or which of two images has it; ``samples.kind_mark``). The kind word comes
    after the image, so it can look the kind up in the image tokens with its own embedding as
    the query; the answer position then only needs to read that word. Without it, presence
    questions ("Is there …?", "Which image has …?") stayed at chance for 800+ steps while
    captions were 90 % right. Not part of the saved model."""

    def __init__(self, model: Any, layer: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(model.config.text_config.hidden_size, 6)
        self.outputs: list[torch.Tensor] = []
        model.model.language_model.layers[layer].register_forward_hook(self._keep)

    def _keep(self, module: Any, _inputs: Any, out: Any) -> None:
        if self.training and module.training:
            self.outputs.append(out[0] if isinstance(out, tuple) else out)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        outputs, self.outputs = self.outputs, []
        marks = batch.get("kind_marks")
        if marks is None or marks.shape[0] == 0 or not outputs:
            return torch.zeros(())
        hidden = outputs[-1][marks[:, 0], marks[:, 1]]
        return torch.nn.functional.cross_entropy(self.head(hidden), marks[:, 2])


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


# --------------------------------------------------------------------------- data


class TrainBatches(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Endless training batches of packed episodes ``0, 1, 2, ...`` of the training split,
    drawn ``pool_batches`` batches at a time, sorted by length and cut into batches."""

    def __init__(self, processor_dir: Path, cfg: TrainConfig, pad_id: int, im_end: int) -> None:
        self.processor_dir = processor_dir
        self.cfg = cfg
        self.pad_id = pad_id
        self.im_end = im_end

    def json_twins(self, episode: Episode, index: int) -> list[tuple[int, str]]:
        """The questions of episode ``index`` that also get a JSON answer (their own random
        stream, so the episodes themselves are those of the base recipe)."""
        if self.cfg.json_share <= 0:
            return []
        rng = np.random.default_rng([JSON_SEED, TRAIN_SEED, index])
        return [(k, json_answer(rng, task, prompt, answer))
                for k, (task, prompt, answer) in enumerate(episode.questions)
                if rng.random() < self.cfg.json_share]

    def single_object_share(self, episode: int) -> float:
        """Curriculum: 1 at the start, the uniform 1/3 after ``curriculum_steps`` steps."""
        progress = min(1.0, episode / max(1, self.cfg.curriculum_steps * self.cfg.batch_size))
        return 1.0 - progress * (2.0 / 3.0)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        torch.set_num_threads(1)
        processor = checkpoint.load_processor(self.processor_dir)
        branch_tokens = BranchTokens(processor, self.im_end)
        pool = self.cfg.batch_size * self.cfg.pool_batches
        index = 0
        while True:
            samples = []
            for i in range(index, index + pool):
                episode = make_episode(TRAIN_SEED, i, self.cfg.questions,
                                       self.single_object_share(i))
                samples.append(encode_episode(episode, processor, self.im_end, branch_tokens,
                                              self.json_twins(episode, i)))
            index += pool
            samples.sort(key=lambda s: s.length)
            batches = [samples[i:i + self.cfg.batch_size]
                       for i in range(0, pool, self.cfg.batch_size)]
            order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(index))
            for k in order.tolist():
                yield collate_packed(batches[k], self.pad_id)


def check_packing(model: Any, processor: Any, pad_id: int, im_end: int) -> float:
    """Every branch of packed episodes (image, two images, clip) gets the logits of its own
    single-question forward; returns the largest difference (raises above 1e-4)."""
    episodes = [make_episode(VALIDATION_SEED, i) for i in range(40)]
    chosen = [next(e for e in episodes if e.media == m) for m in ("image", "images", "video")]
    batch = collate_packed([encode_episode(e, processor, im_end) for e in chosen], pad_id)
    worst = 0.0
    with torch.no_grad():
        packed = packed_forward(model, batch)
        for b, episode in enumerate(chosen):
            for k in range(len(episode.questions)):
                single = encode(episode.item(k), processor, im_end)
                inputs, _ = collate([single], pad_id)
                reference = model(**inputs).logits[0]
                ours = packed[b][batch["branch"][b] == k]
                end = single.length
                worst = max(worst, float((ours - reference[end - ours.shape[0]:end])
                                         .abs().max()))
    if worst > 1e-4:
        raise RuntimeError(f"packed episodes differ from single questions by {worst:.2e}")
    return worst


def encode_split(seed: int, count: int, processor: Any, im_end: int) -> list[Sample]:
    return [encode(make_item(seed, i), processor, im_end) for i in range(count)]


def encode_json_split(seed: int, count: int, processor: Any, im_end: int) -> list[Sample]:
    """The same items answered in JSON (one key drawn per item)."""
    samples = []
    for i in range(count):
        item = make_item(seed, i)
        rng = np.random.default_rng([JSON_SEED, seed, i])
        samples.append(encode_json(item, json_answer(rng, item.task, item.prompt, item.answer),
                                   processor, im_end))
    return samples


# --------------------------------------------------------------------------- evaluation


@torch.no_grad()
def accuracy(model: Any, samples: list[Sample], pad_id: int, batch_size: int
             ) -> tuple[float, dict[str, float]]:
    """Share of exactly right greedy answers (teacher-forced check), overall and per task."""
    model.eval()
    right: dict[str, list[bool]] = {}
    for batch in length_batches(samples, batch_size):
        inputs, labels = collate(batch, pad_id)
        ok = exact_matches(model(**inputs).logits, labels).tolist()
        for sample, good in zip(batch, ok, strict=True):
            right.setdefault(sample.task, []).append(bool(good))
    model.train()
    total = sum(sum(v) for v in right.values()) / sum(len(v) for v in right.values())
    return total, {task: sum(v) / len(v) for task, v in sorted(right.items())}


# --------------------------------------------------------------------------- training


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _process_cpu(pid: int) -> float:
    """CPU seconds of a running process (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class Clock:
    """Wall and CPU time since the start, the running data worker included."""

    wall_start: float
    cpu_start: float
    batches: Any  # the DataLoader iterator (its worker processes)

    def wall(self) -> float:
        return time.perf_counter() - self.wall_start

    def cpu(self) -> float:
        workers = getattr(self.batches, "_workers", [])
        return (cpu_seconds() - self.cpu_start
                + sum(_process_cpu(w.pid) for w in workers if w.is_alive()))


def train(cfg: TrainConfig, hf_out: Path, out: Path | None, work: Path) -> dict[str, Any]:
    started, cpu_started = time.perf_counter(), cpu_seconds()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)

    tok = checkpoint.train_tokenizer()
    processor_dir = work / "processor"
    checkpoint.write_processor_files(processor_dir, tok)
    processor = checkpoint.load_processor(processor_dir)
    ids = checkpoint.tiny.token_ids(tok)
    pad_id, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
    if cfg.init:
        init = REPO / cfg.init  # a relative path is the repository's
        model, legacy = checkpoint.load_model(init)
        base_log = (init / "training.json").read_text()
    else:
        model, legacy = checkpoint.new_model(tok)
    if cfg.freeze_vision:
        model.model.visual.requires_grad_(False)
    use_linear_patch_embedding(model)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model: %d parameters (vision %d)", n_params,
                sum(p.numel() for p in model.model.visual.parameters()))

    validation = encode_split(VALIDATION_SEED, cfg.eval_items, processor, im_end)
    json_validation = (encode_json_split(VALIDATION_SEED, cfg.eval_items, processor, im_end)
                       if cfg.json_share > 0 else [])
    logger.info("packed episodes match single questions to %.1e",
                check_packing(model.eval(), processor, pad_id, im_end))
    model.train()
    probe = VisionProbe(model)
    probe.train(cfg.aux_weight > 0)
    question_probe = QuestionProbe(model, cfg.question_probe_layer)
    question_probe.train(cfg.question_aux_weight > 0)
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    named = [*model.named_parameters(),
             *(("model.visual.probe." + n, p) for n, p in probe.named_parameters()),
             *(("question_probe." + n, p) for n, p in question_probe.named_parameters())]
    for name, param in named:
        if not param.requires_grad:
            continue
        decays = param.dim() >= 2 and "embed" not in name
        groups.setdefault((name.startswith("model.visual."), decays), []).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": params, "weight_decay": cfg.weight_decay if decays else 0.0,
          "lr_scale": cfg.vision_lr_scale if vision else 1.0}
         for (vision, decays), params in sorted(groups.items())],
        lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)
    loader = torch.utils.data.DataLoader(
        TrainBatches(processor_dir, cfg, pad_id, im_end), batch_size=None, num_workers=1,
        prefetch_factor=4, persistent_workers=False)

    log: list[dict[str, Any]] = []
    best: tuple[float, int, dict[str, torch.Tensor]] | None = None
    ema_loss, steps, stop_reason, questions_seen = 0.0, 0, "max_steps", 0
    batches = iter(loader)
    clock = Clock(started, cpu_started, batches)
    for step, batch in enumerate(batches):
        if step >= cfg.max_steps:
            break
        steps = step + 1
        questions_seen += int((batch["branch"].max(dim=1).values + 1).sum())
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg) * group["lr_scale"]
        logits, target = shifted(packed_forward(model, batch), batch["labels"])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 target.reshape(-1), ignore_index=IGNORE)
        aux = probe.loss(batch) if cfg.aux_weight > 0 else torch.zeros(())
        qaux = (question_probe.loss(batch) if cfg.question_aux_weight > 0
                else torch.zeros(()))
        optimizer.zero_grad(set_to_none=True)
        (loss + cfg.aux_weight * aux + cfg.question_aux_weight * qaux).backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named if p.requires_grad], cfg.grad_clip)
        optimizer.step()
        ema_loss = loss.item() if step == 0 else 0.95 * ema_loss + 0.05 * loss.item()
        if step % 20 == 0:
            logger.info("step %d loss %.4f (ema %.4f) aux %.3f q %.3f lr %.2e  wall %.0f s "
                        "cpu %.0f s", step, loss.item(), ema_loss, aux.item(), qaux.item(),
                        lr_at(step, cfg), clock.wall(), clock.cpu())
        if steps % cfg.eval_every and steps != cfg.max_steps:
            continue
        acc, per_task = accuracy(model, validation, pad_id, 32)
        entry = {"step": steps, "loss_ema": round(ema_loss, 4), "validation_accuracy": acc,
                 "per_task": per_task, "wall_s": round(clock.wall(), 1),
                 "cpu_s": round(clock.cpu(), 1)}
        score = acc
        if json_validation:  # both ways of answering count
            entry["json_accuracy"], entry["json_per_task"] = accuracy(
                model, json_validation, pad_id, 32)
            score = (acc + entry["json_accuracy"]) / 2
        log.append(entry)
        logger.info("eval %s", json.dumps(entry))
        if best is None or score > best[0]:
            best = (score, steps, copy.deepcopy(model.state_dict()))
        if score >= cfg.target:
            stop_reason = "target"
            break
        # stop before the next evaluation round would overrun a budget
        if clock.cpu() * (1 + cfg.eval_every / steps) > cfg.budget_cpu_minutes * 60:
            stop_reason = "cpu budget"
            break
        if (cfg.budget_wall_minutes
                and clock.wall() * (1 + cfg.eval_every / steps) > cfg.budget_wall_minutes * 60):
            stop_reason = "wall budget"
            break
    batches._shutdown_workers()  # type: ignore[attr-defined]  # its CPU time is now counted
    assert best is not None
    model.load_state_dict(best[2])
    model.eval()
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started

    checkpoint.save_checkpoint(model, legacy, tok, hf_out)
    summary: dict[str, Any] = {
        "model": checkpoint.MODEL_NAME, "parameters": n_params,
        "stop_reason": stop_reason, "steps": steps, "best_step": best[1],
        "validation_accuracy": best[0], "train_wall_s": round(wall, 1),
        "train_cpu_s": round(cpu, 1),
        "episodes_seen": steps * cfg.batch_size, "questions_seen": questions_seen,
        "config": asdict(cfg), "spec": asdict(checkpoint.SPEC),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "evals": log,
    }
    if cfg.init:  # the base run's log stays; this stage's goes beside it
        (hf_out / "training.json").write_text(base_log)
        (hf_out / "finetune.json").write_text(json.dumps(summary, indent=1) + "\n")
    else:
        (hf_out / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    if out is not None:
        convert(hf_out, out, "f32")
    return summary


def convert(hf_dir: Path, out: Path, text_type: str) -> None:
    from edgevlm.convert.cli import main as convert_main

    code = convert_main([str(hf_dir), "-o", str(out), "--type", text_type, "--quiet"])
    if code != 0:
        raise RuntimeError(f"edgevlm convert failed with exit code {code}")


# The second stage's recipe (``--stage json``): from the base checkpoint, 1,200 steps at a
# quarter of the base learning rate with JSON twins for 30 % of the questions, the ViT fixed.
JSON_STAGE: dict[str, Any] = {
    "init": str(DEFAULT_HF_OUT.relative_to(REPO)), "json_share": 0.3, "freeze_vision": 1,
    "aux_weight": 0.0, "question_aux_weight": 0.0, "max_steps": 1200, "eval_every": 200, "lr": 5e-4,
    "warmup_steps": 20, "curriculum_steps": 0, "target": 2.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=("base", "json"), default="base",
                        help="base: train from scratch (the defaults below); json: the "
                        "second stage, one-field JSON answers, from --init (default: the "
                        "committed checkpoint), with the JSON_STAGE values as defaults")
    defaults = TrainConfig()
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="GGUF output directory (model.gguf + mmproj.gguf)")
    parser.add_argument("--no-convert", action="store_true", help="skip edgevlm convert")
    parser.add_argument("--hf-out", type=Path, default=DEFAULT_HF_OUT,
                        help="Hugging Face checkpoint output directory")
    parser.add_argument("--work", type=Path, default=REPO / "build" / "demo_model",
                        help="scratch directory (processor files)")
    for field, value in asdict(defaults).items():
        parser.add_argument("--" + field.replace("_", "-"), type=type(value), default=value)
    args = parser.parse_args(argv)
    if args.stage == "json":
        parser.set_defaults(**JSON_STAGE)
        args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    transformers.logging.set_verbosity_error()
    cfg = TrainConfig(**{f: getattr(args, f) for f in asdict(defaults)})
    summary = train(cfg, args.hf_out, None if args.no_convert else args.out, args.work)
    logger.info("done: %s", json.dumps({k: v for k, v in summary.items()
                                        if k not in ("evals", "config", "spec")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
