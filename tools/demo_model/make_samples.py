#!/usr/bin/env python3
"""Write the sample frames ``edgevlm demo`` sends: ``daemon/edgevlm/models/samples/``.

The samples are held-out scenes of the demo model (``scenes.make_item(TEST_SEED, index,
task)`` from index 20,000 on; the test seed is never used in training or model selection),
**picked to show what the model does well**: for each sample, the first scene of its task (and
filter, e.g. a "yes" for "Is there a ...?") whose file, byte for byte as written here (JPEG
quality 95 or PNG), the bundled model answers exactly right the way ``edgevlm demo`` asks —
greedy, ``max_tokens`` 64, the image sent as its file bytes. The camera frame is answered
with the model's default sampling (the daemon's camera path sets no temperature), so it must
also be one where that sampling can only pick the greedy token. Scenes answered wrong on the
way are skipped and counted; the count, and the model's accuracy on the first 200 unselected
held-out scenes, go into ``samples.json`` ("about") so nobody mistakes the samples for a
random draw. ``samples.json`` lists each frame's prompt and the truth of the scene (what the
scene shows, never the model's answer).

Run after changing ``scenes.py`` or the model: ``python tools/demo_model/make_samples.py``
(about half a minute; needs the built ``edgevlm`` package). ``--dry-run`` only prints.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.demo_model.scenes import TEST_SEED, Item, make_item  # noqa: E402

if TYPE_CHECKING:
    from edgevlm.engine import Engine, GenerationResult

OUT = REPO / "daemon" / "edgevlm" / "models" / "samples"
FIRST_INDEX = 20_000
LAST_INDEX = 20_999          # give up (an error) rather than search forever
MAX_TOKENS = 64              # what `edgevlm demo` asks for, and a camera's default
JPEG_QUALITY = 95
MAX_FILE_BYTES = 24 * 1024   # keeps the package small; a noisy PNG must be a small frame
HELD_OUT = 200               # unselected held-out scenes scored for contrast (evaluate.py)


@dataclass(frozen=True)
class Spec:
    name: str
    file: str
    task: str
    via: str                       # "request": a describe request; "camera": a camera topic
    wanted: Callable[[Item], bool]
    filter: str                    # ``wanted`` in words, for the report


def _objects(item: Item) -> int:
    return len(item.scenes[0].objects)


SPECS = (
    Spec("front door", "front_door.jpg", "caption", "request",
         lambda it: _objects(it) == 3, "three objects"),
    Spec("driveway", "driveway.jpg", "exists", "request",
         lambda it: it.answer == "yes", "the answer is yes"),
    Spec("garden", "garden.jpg", "count", "request",
         lambda it: it.answer != "1", "more than one object"),
    Spec("porch", "porch.jpg", "colour", "request", lambda it: True, "any"),
    Spec("garage", "garage.jpg", "what_at", "request",
         lambda it: it.answer != "nothing", "something is there"),
    Spec("back door", "back_door.png", "caption", "camera",
         lambda it: _objects(it) == 2, "two objects"),
)


def encode(item: Item, file: str) -> bytes:
    """The file's bytes: PNG (optimised) or JPEG at :data:`JPEG_QUALITY`."""
    buf = io.BytesIO()
    if file.endswith(".png"):
        item.images[0].save(buf, "PNG", optimize=True)
    else:
        item.images[0].save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


def ask(engine: Engine, data: bytes, prompt: str, **params: Any) -> GenerationResult:
    """The answer to ``prompt`` about the image file ``data`` (``params``: sampling; none =
    the model's defaults, as a camera frame gets)."""
    return engine.generate([{"role": "user", "content": [
        {"type": "image", "image": data}, {"type": "text", "text": prompt}]}],
        max_tokens=MAX_TOKENS, **params)


def sampling_is_forced(engine: Engine, logits: np.ndarray) -> bool:
    """True when the model's default sampling can only pick the greedy token at each step of
    a greedy run (``logits``: [steps, vocab]): after the temperature, the top token alone holds
    at least ``top_p`` of the probability (measured over the whole vocabulary, which is at
    most its share among the ``top_k``), so nucleus sampling keeps nothing else."""
    s = engine.sampling
    if s.temperature <= 0 or s.top_k == 1:
        return True
    if s.top_p >= 1 or s.repetition_penalty != 1:
        return False
    z = logits.astype(np.float64) / s.temperature
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    top = p.max(axis=1) / p.sum(axis=1)
    return bool((top >= s.top_p + 1e-3).all())


def answered_right(engine: Engine, data: bytes, prompt: str, truth: str, via: str) -> str | None:
    """``None`` when the sample is answered exactly ``truth``, else what went wrong."""
    result = ask(engine, data, prompt, temperature=0.0, want_logits=True)
    if result.finish_reason != "stop" or result.text != truth:
        return f"answered {result.text!r} ({result.finish_reason})"
    if via == "camera":
        assert result.logits is not None
        if not sampling_is_forced(engine, result.logits):
            return "right when greedy, but the default sampling could pick another token"
    return None


@dataclass(frozen=True)
class Picked:
    spec: Spec
    index: int
    item: Item
    data: bytes
    skipped_wrong: tuple[tuple[int, str, str, str], ...]  # (index, prompt, truth, what)


def pick(engine: Engine, log: Callable[[str], None] = print) -> list[Picked]:
    """One held-out scene per :data:`SPECS` entry, each at a new index (deterministic)."""
    picked = []
    index = FIRST_INDEX
    for spec in SPECS:
        wrong: list[tuple[int, str, str, str]] = []
        while True:
            if index > LAST_INDEX:
                raise RuntimeError(f"{spec.name}: no scene answered right up to {LAST_INDEX}")
            item = make_item(TEST_SEED, index, task=spec.task)
            data = encode(item, spec.file)
            if (item.task == spec.task and spec.wanted(item)
                    and len(data) <= MAX_FILE_BYTES):
                problem = answered_right(engine, data, item.prompt, item.answer, spec.via)
                if problem is None:
                    log(f"{spec.file}: scene {index}, {item.prompt!r} -> {item.answer!r}")
                    picked.append(Picked(spec, index, item, data, tuple(wrong)))
                    index += 1
                    break
                log(f"  skipped scene {index} ({spec.task}), {item.prompt!r}, truth "
                    f"{item.answer!r}: {problem}")
                wrong.append((index, item.prompt, item.answer, problem))
            index += 1
    return picked


def held_out_accuracy(model_dir: Path, count: int = HELD_OUT) -> float:
    """The model's share of exactly right answers on the first ``count`` held-out scenes
    (unselected; tools/demo_model/evaluate.py, the number docs/demo-model.md reports)."""
    from tools.demo_model.evaluate import engine_answers, held_out_items, score

    items = held_out_items(count)
    return float(score(items, engine_answers(model_dir, items))["accuracy"])


def about(picked: list[Picked], accuracy: float) -> str:
    asked = picked[-1].index - FIRST_INDEX + 1
    tried = len(picked) + sum(len(p.skipped_wrong) for p in picked)
    wrong = tried - len(picked)
    return (
        "Held-out scenes of the demo model (tools/demo_model/scenes.py, "
        f"make_item(TEST_SEED={TEST_SEED}, index), index {FIRST_INDEX} to {picked[-1].index}; "
        "never used in training), PICKED to show what the model does well: for each sample "
        "the first scene (at a new index) of its task and filter whose file, as written, the "
        f"model answers exactly right (greedy, max_tokens {MAX_TOKENS}; the camera frame also "
        f"under the model's default sampling). On the way it was asked about {tried} scenes "
        f"({asked} indices scanned; the others had another task, failed the filter or made "
        f"too big a file) and got {wrong} wrong. It is not always right: on the first "
        f"{HELD_OUT} held-out scenes, unselected, it is {100 * accuracy:.1f} % right, and "
        "docs/demo-model.md says what it gets wrong. 'truth' is what the scene shows, not what "
        "the model says. 'via': 'camera' frames go to a camera topic instead of a describe "
        "request. Written by tools/demo_model/make_samples.py.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="pick and print, write nothing")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    from edgevlm.engine import Engine
    from edgevlm.models import demo_model_dir

    engine = Engine.load(demo_model_dir(), threads=args.threads, context=1024)
    picked = pick(engine)
    accuracy = held_out_accuracy(demo_model_dir())
    text = about(picked, accuracy)
    print(text)
    if args.dry_run:
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    listed = []
    for p in picked:
        (OUT / p.spec.file).write_bytes(p.data)
        entry = {"name": p.spec.name, "image": p.spec.file, "prompt": p.item.prompt,
                 "truth": p.item.answer}
        if p.spec.via == "camera":
            entry["via"] = "camera"
        listed.append(entry)
    (OUT / "samples.json").write_text(json.dumps({"about": text, "samples": listed},
                                                 indent=1) + "\n")
    print(f"wrote {len(listed)} samples to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
