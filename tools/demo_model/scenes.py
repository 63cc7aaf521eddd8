"""Synthetic camera scenes with ground truth, and the questions the demo model is trained on.

Everything is a pure function of ``(seed, index)``: :func:`make_item` draws one task from
``numpy.random.default_rng([seed, index])``, so any item of any split can be rebuilt alone and
the same seed always gives the same pixels and the same answer (Pillow drawing + numpy noise;
no fonts, no system state).

A scene is a background (street, room or garden, tinted and noisy) and 1–3 objects, each a
kind (person, car, package, cat, circle, triangle), a colour (red, green, blue, yellow,
white, black) and a slot (left, centre, right; one object per slot), drawn with simple shapes
on the ground line. Images come in several sizes and aspect ratios (96×96 … 480×320, portrait
too); the model's own ``smart_resize`` brings them to its pixel bounds.

Answers are short and canonical, so "exactly right" means string equality:

=============  ========================================  ==========================================
task           prompt                                    answer
=============  ========================================  ==========================================
caption        Describe the scene.                       a red car on the left and a person in
                                                         blue on the right
exists         Is there a cat?                           yes | no
count          How many objects are there?               1 | 2 | 3
count_kind     How many cars are there?                  0 | 1 | 2 | 3
colour         What colour is the car?                   red  (only asked of a kind seen once)
where          Where is the car?                         left | centre | right  (kind seen once)
what_at        What is on the left?                      a red car | a person in blue | nothing
which_has      (two images) Which image has a cat?       first | second
moved          (4-frame clip) What moved?                the red car moved right
=============  ========================================  ==========================================

Captions list the objects left to right: ``X``, ``X and Y``, ``X, Y and Z``; an object is
"a person in <colour>" or "a <colour> <kind>", followed by "on the left", "in the centre" or
"on the right".

Splits: training draws from :data:`TRAIN_SEED`, the validation set the trainer stops on from
:data:`VALIDATION_SEED`, and the held-out test set the model card reports from
:data:`TEST_SEED` (never seen during training or model selection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from PIL import Image, ImageDraw

TRAIN_SEED = 1
VALIDATION_SEED = 2
TEST_SEED = 3

KINDS = ("person", "car", "package", "cat", "circle", "triangle")
PLURALS = {"person": "people"}
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (210, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 210),
    "yellow": (235, 200, 40), "white": (240, 240, 240), "black": (30, 30, 30),
}
SLOTS = ("left", "centre", "right")
SLOT_PHRASES = ("on the left", "in the centre", "on the right")

# (width, height) of single and paired images: square, 4:3, 3:2, 16:9 and portrait.
IMAGE_SIZES: tuple[tuple[int, int], ...] = (
    (96, 96), (128, 96), (160, 120), (192, 192), (224, 160), (256, 144), (192, 256),
    (240, 320), (320, 240), (320, 180), (384, 256), (400, 300), (480, 320), (480, 270),
)
# Clip frames: multiples of 32 that the model's video bounds keep as they are (see
# tools/demo_model/train.py), so transformers needs no torchvision resize for them.
VIDEO_SIZES: tuple[tuple[int, int], ...] = ((128, 96), (160, 128), (192, 128), (224, 128))
VIDEO_FRAMES = 4
VIDEO_FPS = 2.0

# Relative frequency of each task in every split.
TASK_WEIGHTS: dict[str, float] = {
    "caption": 3.0, "exists": 2.0, "count": 1.0, "count_kind": 1.0, "colour": 1.5,
    "where": 1.5, "what_at": 1.0, "which_has": 1.5, "moved": 1.5,
}
TASKS = tuple(TASK_WEIGHTS)

_BACKGROUNDS = {  # (upper colour, lower colour, horizon as a fraction of the height)
    "street": ((185, 205, 225), (120, 120, 125), 0.55),
    "room": ((215, 200, 170), (140, 105, 75), 0.62),
    "garden": ((175, 200, 220), (105, 125, 85), 0.58),
}
_SKIN = (225, 180, 140)
_DARK = (55, 55, 65)

MediaKind = Literal["image", "images", "video"]


# --------------------------------------------------------------------------- scenes


@dataclass(frozen=True)
class SceneObject:
    kind: str
    colour: str
    slot: int  # 0 left, 1 centre, 2 right

    def phrase(self) -> str:
        """"a person in red" / "a red car"."""
        if self.kind == "person":
            return f"a person in {self.colour}"
        return f"a {self.colour} {self.kind}"


@dataclass(frozen=True)
class Scene:
    """Ground truth of one picture plus the random choices that only affect its pixels."""

    width: int
    height: int
    background: str
    objects: tuple[SceneObject, ...]  # sorted by slot
    style_seed: int  # tints, jitter, noise

    def kinds(self) -> list[str]:
        return [o.kind for o in self.objects]

    def caption(self) -> str:
        parts = [f"{o.phrase()} {SLOT_PHRASES[o.slot]}" for o in self.objects]
        if len(parts) == 1:
            return parts[0]
        return ", ".join(parts[:-1]) + " and " + parts[-1]


def _pick(rng: np.random.Generator, values: Sequence[Any]) -> Any:
    return values[int(rng.integers(len(values)))]


def sample_scene(rng: np.random.Generator, size: tuple[int, int], n_objects: int | None = None,
                 must_have: str | None = None, must_not_have: str | None = None) -> Scene:
    """A random scene of ``size``; optionally forcing a kind in or out."""
    n = int(rng.integers(1, 4)) if n_objects is None else n_objects
    slots = sorted(int(s) for s in rng.choice(3, size=n, replace=False))
    allowed = [k for k in KINDS if k != must_not_have]
    kinds = [str(_pick(rng, allowed)) for _ in slots]
    if must_have is not None and must_have not in kinds:
        kinds[int(rng.integers(n))] = must_have
    objects = tuple(SceneObject(k, str(_pick(rng, list(COLOURS))), s)
                    for k, s in zip(kinds, slots, strict=True))
    return Scene(size[0], size[1], str(_pick(rng, list(_BACKGROUNDS))), objects,
                 int(rng.integers(2**31)))


# --------------------------------------------------------------------------- drawing


def _jitter(rng: np.random.Generator, rgb: tuple[int, int, int], amount: int
            ) -> tuple[int, int, int]:
    r, g, b = (int(np.clip(c + rng.integers(-amount, amount + 1), 0, 255)) for c in rgb)
    return r, g, b


def _shade(rgb: tuple[int, int, int], factor: float) -> tuple[int, int, int]:
    r, g, b = (int(min(255, c * factor)) for c in rgb)
    return r, g, b


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels of the picture

# (width, height) of each kind's bounding box, in units of the object's nominal size
_EXTENT = {"person": (0.42, 1.0), "car": (1.0, 0.55), "package": (0.62, 0.55),
           "cat": (0.96, 0.6), "circle": (0.62, 0.62), "square": (0.58, 0.58),
           "triangle": (0.7, 0.62)}


def _draw_object(draw: ImageDraw.ImageDraw, rng: np.random.Generator, obj: SceneObject,
                 cx: float, ground: float, unit: float) -> Box:
    """One object standing on ``ground`` around ``cx``; ``unit`` is its nominal size.
    Returns its bounding box."""
    c = _jitter(rng, COLOURS[obj.colour], 12)
    flip = bool(rng.integers(2))

    def box(w: float, h: float) -> tuple[float, float, float, float]:
        return cx - w / 2, ground - h, cx + w / 2, ground

    def mx(x: float) -> float:  # mirror around cx when flipped
        return 2 * cx - x if flip else x

    if obj.kind == "person":
        x0, y0, x1, y1 = box(0.42 * unit, unit)
        w, h = x1 - x0, y1 - y0
        r = 0.13 * h
        draw.ellipse([cx - r, y0, cx + r, y0 + 2 * r], fill=_SKIN)
        draw.rectangle([x0, y0 + 0.27 * h, x1, y0 + 0.64 * h], fill=c)
        leg = 0.36 * w
        draw.rectangle([x0 + 0.06 * w, y0 + 0.64 * h, x0 + 0.06 * w + leg, y1], fill=_DARK)
        draw.rectangle([x1 - 0.06 * w - leg, y0 + 0.64 * h, x1 - 0.06 * w, y1], fill=_DARK)
    elif obj.kind == "car":
        x0, y0, x1, y1 = box(unit, 0.55 * unit)
        w, h = x1 - x0, y1 - y0
        body_top = y0 + 0.42 * h
        draw.rectangle([x0, body_top, x1, y1 - 0.16 * h], fill=c)
        cabin = [(mx(x0 + 0.18 * w), body_top), (mx(x0 + 0.3 * w), y0),
                 (mx(x0 + 0.68 * w), y0), (mx(x0 + 0.82 * w), body_top)]
        draw.polygon(cabin, fill=c)
        draw.polygon([(mx(x0 + 0.3 * w), body_top), (mx(x0 + 0.36 * w), y0 + 0.12 * h),
                      (mx(x0 + 0.64 * w), y0 + 0.12 * h), (mx(x0 + 0.72 * w), body_top)],
                     fill=(170, 200, 225))
        r = 0.17 * h
        for wx in (x0 + 0.24 * w, x1 - 0.24 * w):
            draw.ellipse([wx - r, y1 - 2 * r, wx + r, y1], fill=(20, 20, 20))
    elif obj.kind == "package":
        x0, y0, x1, y1 = box(0.62 * unit, 0.55 * unit)
        w, h = x1 - x0, y1 - y0
        tape = (120, 85, 50) if obj.colour in ("white", "yellow") else (235, 215, 165)
        draw.rectangle([x0, y0, x1, y1], fill=c, outline=_shade(c, 0.6),
                       width=max(1, round(0.05 * w)))
        t = max(1.5, 0.07 * w)
        draw.rectangle([cx - t, y0, cx + t, y1], fill=tape)
        draw.rectangle([x0, y0 + 0.45 * h - t, x1, y0 + 0.45 * h + t], fill=tape)
    elif obj.kind == "cat":
        x0, y0, x1, y1 = box(0.8 * unit, 0.6 * unit)
        w, h = x1 - x0, y1 - y0
        bx0, bx1 = sorted((mx(x0), mx(x0 + 0.72 * w)))
        draw.ellipse([bx0, y0 + 0.4 * h, bx1, y1], fill=c)
        hx0, hx1 = sorted((mx(x1 - 0.38 * w), mx(x1)))
        draw.ellipse([hx0, y0 + 0.18 * h, hx1, y0 + 0.62 * h], fill=c)
        for ex in (0.05, 0.55):
            ax = hx0 + ex * (hx1 - hx0)
            draw.polygon([(ax, y0 + 0.3 * h), (ax + 0.2 * (hx1 - hx0), y0),
                          (ax + 0.4 * (hx1 - hx0), y0 + 0.3 * h)], fill=c)
        tx = mx(x0 + 0.05 * w)
        draw.line([(tx, y0 + 0.7 * h), (mx(x0 - 0.08 * w), y0 + 0.25 * h)], fill=c,
                  width=max(2, round(0.08 * h)))
    elif obj.kind == "circle":
        d = 0.62 * unit
        draw.ellipse([cx - d / 2, ground - d, cx + d / 2, ground], fill=c)
    elif obj.kind == "square":
        x0, y0, x1, y1 = box(0.58 * unit, 0.58 * unit)
        draw.rectangle([x0, y0, x1, y1], fill=c)
    elif obj.kind == "triangle":
        x0, y0, x1, y1 = box(0.7 * unit, 0.62 * unit)
        draw.polygon([(x0, y1), (cx, y0), (x1, y1)], fill=c)
    else:
        raise ValueError(f"unknown kind {obj.kind!r}")
    ew, eh = _EXTENT[obj.kind]
    return cx - ew * unit / 2, ground - eh * unit, cx + ew * unit / 2, ground


@dataclass(frozen=True)
class _Layout:
    """Where the objects of a scene stand (shared by all frames of a clip)."""

    unit: float
    ground: float
    offsets: tuple[float, ...]  # per object, a fraction of a slot's width


def _layout(scene: Scene, rng: np.random.Generator) -> _Layout:
    slot_w = scene.width / 3
    unit = min(slot_w * 0.95, scene.height * 0.8) * float(rng.uniform(0.88, 1.0))
    horizon = _BACKGROUNDS[scene.background][2] * scene.height
    ground = horizon + (scene.height - horizon) * float(rng.uniform(0.45, 0.8))
    ground = min(ground, scene.height - 2.0)
    offsets = tuple(float(rng.uniform(-0.06, 0.06)) for _ in scene.objects)
    return _Layout(unit, ground, offsets)


def render(scene: Scene, slot_positions: Sequence[float] | None = None,
           noise_seed: int | None = None) -> Image.Image:
    """The RGB picture of ``scene``. ``slot_positions`` overrides each object's (fractional)
    slot, for the frames of a clip; ``noise_seed`` varies only the sensor noise."""
    return render_with_boxes(scene, slot_positions, noise_seed)[0]


def render_with_boxes(scene: Scene, slot_positions: Sequence[float] | None = None,
                      noise_seed: int | None = None) -> tuple[Image.Image, tuple[Box, ...]]:
    """:func:`render` plus each object's bounding box."""
    rng = np.random.default_rng(scene.style_seed)
    top, bottom, horizon_frac = _BACKGROUNDS[scene.background]
    img = Image.new("RGB", (scene.width, scene.height), _jitter(rng, top, 15))
    draw = ImageDraw.Draw(img)
    horizon = round(horizon_frac * scene.height)
    draw.rectangle([0, horizon, scene.width, scene.height], fill=_jitter(rng, bottom, 15))
    layout = _layout(scene, rng)
    slot_w = scene.width / 3
    boxes = []
    for i, obj in enumerate(scene.objects):
        slot = obj.slot if slot_positions is None else slot_positions[i]
        cx = (slot + 0.5 + layout.offsets[i]) * slot_w
        boxes.append(_draw_object(draw, rng, obj, cx, layout.ground, layout.unit))
    noise_rng = np.random.default_rng(scene.style_seed if noise_seed is None else noise_seed)
    pixels = np.asarray(img, dtype=np.int16)
    pixels = pixels + noise_rng.integers(-6, 7, size=pixels.shape, dtype=np.int16)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB"), tuple(boxes)


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Item:
    """One question about one image, two images or one clip, with its exact answer."""

    task: str
    media: MediaKind
    images: tuple[Image.Image, ...] = field(repr=False)  # 1 image, 2 images, or the frames
    prompt: str
    answer: str
    scenes: tuple[Scene, ...]

    def edgevlm_messages(self) -> list[dict[str, Any]]:
        """The chat messages for ``Engine.generate`` (images as PIL images)."""
        parts: list[dict[str, Any]]
        if self.media == "video":
            parts = [{"type": "video_frames", "video_frames": list(self.images),
                      "fps": VIDEO_FPS}]
        else:
            parts = [{"type": "image", "image": im} for im in self.images]
        return [{"role": "user", "content": [*parts, {"type": "text", "text": self.prompt}]}]

    def hf_messages(self) -> list[dict[str, Any]]:
        """The same messages for transformers' chat template (media passed separately)."""
        parts: list[dict[str, Any]] = ([{"type": "video"}] if self.media == "video"
                                       else [{"type": "image"} for _ in self.images])
        return [{"role": "user", "content": [*parts, {"type": "text", "text": self.prompt}]}]


def _article_kind(kind: str) -> str:
    return f"a {kind}"


Question = tuple[str, str, str]  # (task, prompt, answer)


def _scene_question(rng: np.random.Generator, scene: Scene, task: str) -> Question:
    """One question of a single-image ``task`` about ``scene``."""
    kinds = scene.kinds()
    unique = [k for k in KINDS if kinds.count(k) == 1]
    if task in ("colour", "where") and not unique:
        task = "what_at"
    if task == "caption":
        return task, "Describe the scene.", scene.caption()
    if task == "exists":
        present = bool(rng.integers(2))
        pool = sorted(set(kinds)) if present else [k for k in KINDS if k not in kinds]
        kind = str(_pick(rng, pool))
        return task, f"Is there {_article_kind(kind)}?", "yes" if present else "no"
    if task == "count":
        return task, "How many objects are there?", str(len(kinds))
    if task == "count_kind":
        # half of the time a kind that is in the picture, so 0 is not the usual answer
        pool = sorted(set(kinds)) if rng.integers(2) else list(KINDS)
        kind = str(_pick(rng, pool))
        return (task, f"How many {PLURALS.get(kind, kind + 's')} are there?",
                str(kinds.count(kind)))
    if task in ("colour", "where"):
        kind = str(_pick(rng, unique))
        obj = next(o for o in scene.objects if o.kind == kind)
        if task == "colour":
            return task, f"What colour is the {kind}?", obj.colour
        return task, f"Where is the {kind}?", SLOTS[obj.slot]
    if task == "what_at":
        slot = int(rng.integers(3))
        obj_at = next((o for o in scene.objects if o.slot == slot), None)
        return (task, f"What is {SLOT_PHRASES[slot]}?",
                obj_at.phrase() if obj_at is not None else "nothing")
    raise ValueError(f"not a single-image task: {task!r}")


def _pair_scenes(rng: np.random.Generator) -> tuple[tuple[Scene, Scene], str, bool]:
    kind = str(_pick(rng, KINDS))
    with_kind = sample_scene(rng, _pick(rng, IMAGE_SIZES), must_have=kind)
    without = sample_scene(rng, _pick(rng, IMAGE_SIZES), must_not_have=kind)
    first_has = bool(rng.integers(2))
    return ((with_kind, without) if first_has else (without, with_kind)), kind, first_has


def _which_has(kind: str, first_has: bool) -> Question:
    return ("which_has", f"Which image has {_article_kind(kind)}?",
            "first" if first_has else "second")


def _video_clip(rng: np.random.Generator) -> tuple[Scene, tuple[Image.Image, ...], str]:
    scene = sample_scene(rng, _pick(rng, VIDEO_SIZES), n_objects=int(rng.integers(1, 3)))
    taken = {o.slot for o in scene.objects}
    # (mover, destination) pairs that do not pass through another object; never empty
    moves = [(i, s) for i, o in enumerate(scene.objects) for s in range(3) if s not in taken
             and not any(min(s, o.slot) < p < max(s, o.slot) for p in taken)]
    mover, end = moves[int(rng.integers(len(moves)))]
    start = scene.objects[mover].slot
    frames = []
    for f in range(VIDEO_FRAMES):
        positions = [float(o.slot) for o in scene.objects]
        positions[mover] = start + (end - start) * f / (VIDEO_FRAMES - 1)
        frames.append(render(scene, positions, noise_seed=scene.style_seed + 1 + f))
    obj = scene.objects[mover]
    noun = "the person in " + obj.colour if obj.kind == "person" else (
        f"the {obj.colour} {obj.kind}")
    return scene, tuple(frames), f"{noun} moved {'right' if end > start else 'left'}"


_TASK_P = np.array([TASK_WEIGHTS[t] for t in TASKS]) / sum(TASK_WEIGHTS.values())


def _draw_task(rng: np.random.Generator) -> str:
    return TASKS[int(rng.choice(len(TASKS), p=_TASK_P))]


def make_item(seed: int, index: int, task: str | None = None) -> Item:
    """Item ``index`` of the split ``seed`` (the task drawn by weight unless given)."""
    rng = np.random.default_rng([seed, index])
    chosen = _draw_task(rng)
    task = task or chosen
    if task == "which_has":
        scenes, kind, first_has = _pair_scenes(rng)
        _, prompt, answer = _which_has(kind, first_has)
        return Item(task, "images", tuple(render(s) for s in scenes), prompt, answer, scenes)
    if task == "moved":
        scene, frames, answer = _video_clip(rng)
        return Item(task, "video", frames, "What moved?", answer, (scene,))
    scene = sample_scene(rng, _pick(rng, IMAGE_SIZES))
    task, prompt, answer = _scene_question(rng, scene, task)
    return Item(task, "image", (render(scene),), prompt, answer, (scene,))


@dataclass(frozen=True)
class Episode:
    """Several questions about the same media (training: the media is encoded once and
    every question is answered from it independently, see ``samples.py``)."""

    media: MediaKind
    images: tuple[Image.Image, ...] = field(repr=False)
    questions: tuple[Question, ...]
    scenes: tuple[Scene, ...] = ()  # ground truth per image (empty for a clip)

    def item(self, k: int) -> Item:
        task, prompt, answer = self.questions[k]
        return Item(task, self.media, self.images, prompt, answer, ())


def make_episode(seed: int, index: int, max_questions: int = 5,
                 single_object_share: float | None = None) -> Episode:
    """Episode ``index`` of split ``seed``: its media kind drawn like :func:`make_item`'s
    tasks; a single image gets a caption and up to ``max_questions - 1`` other questions, a
    pair one "which image has" question per kind only one of them shows, a clip its
    "What moved?". ``single_object_share`` sets the share of single images with one object
    (the rest have 2 or 3; default: 1, 2, 3 equally likely)."""
    rng = np.random.default_rng([seed, index])
    task = _draw_task(rng)
    if task == "which_has":
        scenes, _, _ = _pair_scenes(rng)
        first, second = (set(s.kinds()) for s in scenes)
        kinds = sorted(first ^ second)
        order = rng.permutation(len(kinds))[:max_questions]
        pair = tuple(_which_has(kinds[i], kinds[i] in first) for i in order)
        return Episode("images", tuple(render(s) for s in scenes), pair, tuple(scenes))
    if task == "moved":
        _, frames, answer = _video_clip(rng)
        return Episode("video", frames, (("moved", "What moved?", answer),))
    n_objects = None
    if single_object_share is not None:
        n_objects = 1 if rng.random() < single_object_share else int(rng.integers(2, 4))
    scene = sample_scene(rng, _pick(rng, IMAGE_SIZES), n_objects=n_objects)
    questions = [_scene_question(rng, scene, "caption")]
    single = [t for t in TASKS if t not in ("caption", "which_has", "moved")]
    for _ in range(max_questions - 1):
        q = _scene_question(rng, scene, str(_pick(rng, single)))
        if all(q[1] != other[1] for other in questions):
            questions.append(q)
    return Episode("image", (render(scene),), tuple(questions), (scene,))


def token_labels(scene: Scene, rows: int, columns: int) -> list[tuple[int, int]]:
    """Row-major over a ``rows`` x ``columns`` grid of equal cells laid on the picture: the
    (kind, colour) class of the object covering most of each cell (0 = background, else
    1 + the index in KINDS / COLOURS) — the targets of the trainer's auxiliary vision loss."""
    boxes = render_with_boxes(scene)[1]
    colours = list(COLOURS)
    cw, ch = scene.width / columns, scene.height / rows
    out = []
    for r in range(rows):
        for c in range(columns):
            best, label = 0.12 * cw * ch, (0, 0)  # at least 12% of the cell
            for obj, (x0, y0, x1, y1) in zip(scene.objects, boxes, strict=True):
                w = min(x1, (c + 1) * cw) - max(x0, c * cw)
                h = min(y1, (r + 1) * ch) - max(y0, r * ch)
                if w > 0 and h > 0 and w * h > best:
                    best = w * h
                    label = (1 + KINDS.index(obj.kind), 1 + colours.index(obj.colour))
            out.append(label)
    return out


def slot_labels(scene: Scene, columns: int) -> list[tuple[int, int]]:
    """(kind, colour) class of the object in the slot under each of ``columns`` equal
    columns (0 = nothing there, else 1 + the index in KINDS / COLOURS): the targets of the
    trainer's auxiliary vision loss."""
    by_slot = {o.slot: o for o in scene.objects}
    colours = list(COLOURS)
    out = []
    for c in range(columns):
        obj = by_slot.get(min(2, int(3 * (c + 0.5) / columns)))
        out.append((0, 0) if obj is None else
                   (1 + KINDS.index(obj.kind), 1 + colours.index(obj.colour)))
    return out


def task_texts() -> list[str]:
    """Every prompt and answer word the tasks can produce (the tokenizer's training text)."""
    lines = ["Describe the scene.", "How many objects are there?", "What moved?", "nothing",
             "yes", "no", "first", "second", *SLOTS, *COLOURS, "0 1 2 3"]
    for kind in KINDS:
        plural = PLURALS.get(kind, kind + "s")
        lines += [f"Is there a {kind}?", f"How many {plural} are there?",
                  f"What colour is the {kind}?", f"Where is the {kind}?",
                  f"Which image has a {kind}?"]
        for colour in COLOURS:
            obj = SceneObject(kind, colour, 0)
            noun = obj.phrase()
            lines += [f"{noun} {p}" for p in SLOT_PHRASES]
            lines += [f"the{noun[1:]} moved left", f"the{noun[1:]} moved right"]
    lines += [f"What is {p}?" for p in SLOT_PHRASES]
    lines += ["a red car on the left, a person in blue in the centre and a cat on the right"]
    lines += ["<0.2 seconds><|vision_start|>", "<1.2 seconds><|vision_start|>"]  # clip timestamps
    return lines
