#!/usr/bin/env python3
"""Write the golden fixtures the native core is tested against, from live transformers.

For every tiny checkpoint (``tools/make_tiny_models.py``) and every case below, transformers
runs in float32 with eager attention and the PIL image path (spec ``qwen3vl.md`` §11, §3.2), and
the script stores one compressed ``.npz`` per case under ``<out>/<model>/<case>.npz``:

  input_ids [L] int32, mm_token_type_ids [L] int32 (0 text, 1 image pad, 2 video pad)
  position_ids [3, L] int32 (t, h, w), rope_delta [] int32     ``get_rope_index`` (spec §7)
  pixel_values [N, 1536] f32, image_grid_thw [I, 3] int32        images, in prompt order
  pixel_values_videos [Nv, 1536] f32, video_grid_thw [Vn, 3] int32
  image{k}_vit_hidden [N_k, C_vit] f32      output of the last ViT block (before the merger)
  image{k}_embeds [N_k/4, D] f32            merger output = rows that replace the image pads
  image{k}_deepstack [taps, N_k/4, D] f32   DeepStack merger outputs, tap order
  video{k}_vit_hidden / video{k}_embeds / video{k}_deepstack   the same for video k
  prompt_logits [L, V] f32                  one full forward over the prompt
  generated_ids [8] int32                   greedy tokens from ``generate`` (KV cache)
  decode_logits [8, V] f32                  raw logits that chose generated_ids[i]; row 0 is
                                            the prefill's last row, row i>0 comes from feeding
                                            generated_ids[i-1] at sequence index L+i-1
  decode_positions [8] int32                position (all 3 axes) of generated_ids[i] when it
                                            is fed back: L + i + rope_delta

plus the PNG inputs (``<out>/images``) and ``<out>/manifest.json`` (versions, configs, and per
case the chat messages, the prompt text the chat template renders, the expanded prompt, array
shapes and max |logit|).

Video without torchvision: transformers 5.24 refuses to build ``Qwen3VLVideoProcessor`` without
torchvision (the module is replaced by a stub). This script loads the real
``video_processing_qwen3_vl.py`` source directly and subclasses its processor, replacing only the
three torchvision calls: ``grayscale_to_rgb`` (a no-op on RGB), ``resize`` (the frames are chosen
so that the video ``smart_resize`` keeps their size, where torchvision's ``resize_image``
returns its input unchanged; any other size raises) and ``normalize`` (a line-for-line port of
``torchvision.transforms.v2.functional.normalize_image``: ``(x - 127.5) / 127.5`` in float32,
the fused rescale+normalise). Frame sampling, ``smart_resize``, ``patchify``, the timestamps and
the prompt layout (per group ``<t seconds><|vision_start|>pads<|vision_end|>``, no outer pair
since transformers 5.25, spec §6) are all transformers' own code, driven through
``Qwen3VLProcessor.__call__``.

Usage: ``python tools/make_golden_fixtures.py [--models DIR] [--out DIR] [--only NAME]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import PIL
import torch
import transformers
from PIL import Image
from transformers import AutoTokenizer, GenerationConfig, Qwen3VLForConditionalGeneration
from transformers.image_processing_backends import TorchvisionBackend
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
from transformers.video_utils import VideoMetadata

logger = logging.getLogger("make_golden_fixtures")

DEFAULT_MODELS = Path("tests/fixtures/models")
DEFAULT_OUT = Path("tests/fixtures/golden")
DECODE_STEPS = 8
SEED = 0
DECODE_CHECK_RTOL = 1e-4  # cached decode vs. a full recompute, relative to max |logit|

# --------------------------------------------------------------------------- input images

FloatArray = npt.NDArray[np.float32]
ByteImage = npt.NDArray[np.uint8]


def _scene(width: int, height: int, seed: int, square_x: int | None = None) -> ByteImage:
    """Gradients, two solid shapes and mild noise: resizing has edges and texture to chew on."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                    (x + 2 * y) * 255 // max(width + 2 * height - 3, 1)], axis=-1)
    img[(x - width // 3) ** 2 + (y - height // 2) ** 2 < (min(width, height) // 4) ** 2] = (
        rng.integers(0, 256, 3))
    side = max(min(width, height) // 4, 4)
    left = width // 2 if square_x is None else square_x
    top = height // 4
    img[top:top + side, left:left + side] = rng.integers(0, 256, 3)
    img = img + rng.integers(-6, 7, size=img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


VIDEO_FRAMES = 5
VIDEO_FPS = 2.0
VIDEO_SIZE = (96, 64)  # width, height: multiples of 32, kept as is by every model's bounds


def make_images(out_dir: Path) -> dict[str, Path]:
    """Write the PNG inputs; returns name -> path. Same pixels on every run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, ByteImage] = {
        "scene_150x90": _scene(150, 90, seed=11),
        "tall_72x120": _scene(72, 120, seed=12),
        "small_40x28": _scene(40, 28, seed=13),
    }
    width, height = VIDEO_SIZE
    for i in range(VIDEO_FRAMES):
        arrays[f"clip_frame{i}_{width}x{height}"] = _scene(width, height, seed=14,
                                                          square_x=8 + 16 * i)
    paths = {}
    for name, pixels in arrays.items():
        path = out_dir / f"{name}.png"
        Image.fromarray(pixels, "RGB").save(path, format="PNG")
        paths[name] = path
    return paths


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One prompt. Media items name images from :func:`make_images`."""

    name: str
    messages: list[dict[str, Any]]

    def image_names(self) -> list[str]:
        return [item["image"] for item in self._items() if item["type"] == "image"]

    def video_names(self) -> list[list[str]]:
        return [item["video"] for item in self._items() if item["type"] == "video"]

    def _items(self) -> list[dict[str, Any]]:
        return [item for m in self.messages if isinstance(m["content"], list)
                for item in m["content"]]


def _frames() -> list[str]:
    width, height = VIDEO_SIZE
    return [f"clip_frame{i}_{width}x{height}" for i in range(VIDEO_FRAMES)]


SYSTEM = "You are a careful camera assistant."
CASES: tuple[Case, ...] = (
    Case("image", [
        {"role": "user", "content": [{"type": "image", "image": "scene_150x90"},
                                     {"type": "text", "text": "Describe this image."}]},
    ]),
    Case("two_images", [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [
            {"type": "image", "image": "tall_72x120"}, {"type": "text", "text": " and "},
            {"type": "image", "image": "small_40x28"},
            {"type": "text", "text": "Compare the two pictures and say what changed."}]},
    ]),
    Case("video", [
        {"role": "user", "content": [{"type": "video", "video": _frames(), "fps": VIDEO_FPS},
                                     {"type": "text", "text": "What happens in this video?"}]},
    ]),
    Case("text", [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Is the garage door open?"},
        {"role": "assistant", "content": "The garage door is closed."},
        {"role": "user", "content": [{"type": "text", "text": "Is the porch light on?"}]},
    ]),
)


def manifest_messages(case: Case) -> list[dict[str, Any]]:
    """The messages with media named by their PNG path relative to the golden directory."""

    def item(entry: dict[str, Any]) -> dict[str, Any]:
        if entry["type"] == "image":
            return {**entry, "image": f"images/{entry['image']}.png"}
        if entry["type"] == "video":
            return {**entry, "video": [f"images/{f}.png" for f in entry["video"]]}
        return dict(entry)

    return [{**m, "content": m["content"] if isinstance(m["content"], str)
             else [item(e) for e in m["content"]]} for m in case.messages]


# --------------------------------------------------------------------------- reference processor


def _load_video_processor_source() -> Any:
    """The real ``video_processing_qwen3_vl`` module (transformers stubs it without torchvision)."""
    import transformers.models.qwen3_vl as package

    name = "transformers.models.qwen3_vl._video_processing_qwen3_vl_source"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(package.__file__).with_name("video_processing_qwen3_vl.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # auto_docstring inspects the source file through sys.modules
    spec.loader.exec_module(module)
    return module


class _TorchOnlyBackend(TorchvisionBackend):
    """The two torchvision calls of the video path, in plain torch (see the module docstring)."""

    def resize(self, image: torch.Tensor, size: Any, resample: Any = None,
               **kwargs: Any) -> torch.Tensor:
        if tuple(image.shape[-2:]) != (size.height, size.width):
            raise NotImplementedError(
                f"resizing video frames {tuple(image.shape[-2:])} -> {(size.height, size.width)} "
                "needs torchvision; use frames whose size smart_resize keeps")
        return image  # torchvision's resize_image returns its input when the size is unchanged

    def normalize(self, image: torch.Tensor, mean: Any, std: Any, inplace: bool = False,
                  **kwargs: Any) -> torch.Tensor:
        # torchvision.transforms.v2.functional.normalize_image, line for line.
        mean_t = torch.as_tensor(mean, dtype=image.dtype, device=image.device)
        std_t = torch.as_tensor(std, dtype=image.dtype, device=image.device)
        if mean_t.ndim == 1:
            mean_t = mean_t.view(-1, 1, 1)
        if std_t.ndim == 1:
            std_t = std_t.view(-1, 1, 1)
        image = image.sub_(mean_t) if inplace else image.sub(mean_t)
        return image.div_(std_t)


@functools.cache
def _video_processor_class() -> type:
    """``Qwen3VLVideoProcessor`` with :class:`_TorchOnlyBackend` ahead of TorchvisionBackend."""
    source = _load_video_processor_source()

    class VideoProcessorWithoutTorchvision(source.Qwen3VLVideoProcessor, _TorchOnlyBackend):
        def convert_to_rgb(self, video: torch.Tensor) -> torch.Tensor:
            if video.shape[-3] != 3:
                raise NotImplementedError("only RGB frames are supported without torchvision")
            return video  # grayscale_to_rgb and convert_to_rgb are no-ops on 3 channels

    return VideoProcessorWithoutTorchvision


class ReferenceProcessor(Qwen3VLProcessor):
    """``Qwen3VLProcessor`` on the PIL image processor, with the torchvision-free video processor.

    ``ProcessorMixin`` type-checks its sub-processors against classes that are stubs without
    torchvision, and takes the list of sub-processors from the ``__init__`` signature: this
    signature declares only the image processor and the tokenizer, and the video processor is
    attached after construction. ``__call__`` (placeholder expansion, timestamps,
    ``mm_token_type_ids``) is transformers' own.
    """

    def __init__(self, image_processor: Any = None, tokenizer: Any = None,
                 chat_template: str | None = None, **kwargs: Any) -> None:
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


def load_processor(model_dir: Path) -> ReferenceProcessor:
    chat_template = json.loads((model_dir / "chat_template.json").read_text())["chat_template"]
    processor = ReferenceProcessor(Qwen2VLImageProcessorPil.from_pretrained(model_dir),
                                   AutoTokenizer.from_pretrained(model_dir),
                                   chat_template=chat_template)
    processor.video_processor = _video_processor_class().from_pretrained(model_dir)
    return processor


# --------------------------------------------------------------------------- one case


def _np(t: torch.Tensor, dtype: type[np.generic]) -> npt.NDArray[Any]:
    return np.ascontiguousarray(t.detach().cpu().numpy().astype(dtype))


def _vision_arrays(prefix: str, features: Any, grid_thw: torch.Tensor,
                   merge_unit: int) -> dict[str, npt.NDArray[Any]]:
    """Per-item ViT output, merged rows and DeepStack rows of one get_*_features call."""
    sizes = grid_thw.prod(-1).tolist()
    hidden = torch.split(features.last_hidden_state, sizes)
    out: dict[str, npt.NDArray[Any]] = {}
    for k, n in enumerate(sizes):
        merged = features.pooler_output[k]
        deepstack = torch.stack([tap[k] for tap in features.deepstack_features])
        if merged.shape[0] * merge_unit != n or deepstack.shape[1] != merged.shape[0]:
            raise RuntimeError(f"{prefix}{k}: {n} patches, {merged.shape[0]} merged rows")
        out[f"{prefix}{k}_vit_hidden"] = _np(hidden[k], np.float32)
        out[f"{prefix}{k}_embeds"] = _np(merged, np.float32)
        out[f"{prefix}{k}_deepstack"] = _np(deepstack, np.float32)
    return out


def _max_rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def run_case(model: Qwen3VLForConditionalGeneration, processor: ReferenceProcessor, case: Case,
             images: dict[str, Path]) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Run one case; returns the arrays and the manifest entry."""
    prompt = processor.apply_chat_template(case.messages, tokenize=False,
                                           add_generation_prompt=True)
    call: dict[str, Any] = {"text": [prompt], "return_tensors": "pt"}
    if case.image_names():
        call["images"] = [Image.open(images[n]).convert("RGB") for n in case.image_names()]
    meta: dict[str, Any] = {}
    if case.video_names():
        clips = [[Image.open(images[f]).convert("RGB") for f in clip]
                 for clip in case.video_names()]
        call["videos"] = clips
        call["video_metadata"] = [VideoMetadata(total_num_frames=len(c), fps=VIDEO_FPS)
                                  for c in clips]
        call["return_metadata"] = True
        call["cap_pixels_per_frame"] = False  # the 5.24 default, stated to silence its warning
    inputs = processor(**call)
    if "video_metadata" in inputs:
        md = inputs.pop("video_metadata")
        meta["video_frames_indices"] = [list(map(int, m.frames_indices)) for m in md]
        meta["video_timestamps"] = [
            processor._calculate_timestamps(m.frames_indices, m.fps,
                                            processor.video_processor.temporal_patch_size)
            for m in md]
    model_inputs = dict(inputs)
    input_ids = model_inputs["input_ids"]
    length = input_ids.shape[1]

    arrays: dict[str, npt.NDArray[Any]] = {
        "input_ids": _np(input_ids[0], np.int32),
        "mm_token_type_ids": _np(model_inputs["mm_token_type_ids"][0], np.int32),
    }
    position_ids, rope_delta = model.model.get_rope_index(
        input_ids, model_inputs["mm_token_type_ids"],
        image_grid_thw=model_inputs.get("image_grid_thw"),
        video_grid_thw=model_inputs.get("video_grid_thw"),
        attention_mask=model_inputs.get("attention_mask"))
    arrays["position_ids"] = _np(position_ids[:, 0], np.int32)
    arrays["rope_delta"] = np.array(int(rope_delta.reshape(-1)[0]), dtype=np.int32)

    merge_unit = model.config.vision_config.spatial_merge_size ** 2
    with torch.no_grad():
        if "pixel_values" in model_inputs:
            arrays["pixel_values"] = _np(model_inputs["pixel_values"], np.float32)
            arrays["image_grid_thw"] = _np(model_inputs["image_grid_thw"], np.int32)
            feats = model.model.get_image_features(model_inputs["pixel_values"],
                                                   model_inputs["image_grid_thw"])
            arrays |= _vision_arrays("image", feats, model_inputs["image_grid_thw"], merge_unit)
        if "pixel_values_videos" in model_inputs:
            arrays["pixel_values_videos"] = _np(model_inputs["pixel_values_videos"], np.float32)
            arrays["video_grid_thw"] = _np(model_inputs["video_grid_thw"], np.int32)
            feats = model.model.get_video_features(model_inputs["pixel_values_videos"],
                                                   model_inputs["video_grid_thw"])
            arrays |= _vision_arrays("video", feats, model_inputs["video_grid_thw"], merge_unit)

        model.model.rope_deltas = None
        prompt_logits = model(**model_inputs, use_cache=False).logits[0]
        arrays["prompt_logits"] = _np(prompt_logits, np.float32)

        model.model.rope_deltas = None
        generated = model.generate(**model_inputs, output_logits=True,
                                   return_dict_in_generate=True)
        tokens = generated.sequences[0, length:]
        if tokens.shape[0] != DECODE_STEPS:
            raise RuntimeError(f"{case.name}: generate returned {tokens.shape[0]} tokens")
        decode_logits = torch.stack([step[0] for step in generated.logits])
        arrays["generated_ids"] = _np(tokens, np.int32)
        arrays["decode_logits"] = _np(decode_logits, np.float32)
        arrays["decode_positions"] = (length + np.arange(DECODE_STEPS, dtype=np.int32)
                                      + arrays["rope_delta"])
        meta["decode_check_max_rel"] = check_decode(model, model_inputs, prompt_logits, tokens,
                                                    decode_logits, case.name)

    tokenizer = processor.tokenizer
    meta |= {
        "prompt": prompt,
        "prompt_expanded": tokenizer.decode(arrays["input_ids"].tolist()),
        "generated_text": tokenizer.decode(arrays["generated_ids"].tolist()),
        "prompt_tokens": length,
        "image_tokens": int((arrays["mm_token_type_ids"] == 1).sum()),
        "video_tokens": int((arrays["mm_token_type_ids"] == 2).sum()),
        "rope_delta": int(arrays["rope_delta"]),
        "max_abs_logit": float(np.abs(arrays["prompt_logits"]).max()),
        "max_abs_decode_logit": float(np.abs(arrays["decode_logits"]).max()),
    }
    return arrays, meta


def check_decode(model: Qwen3VLForConditionalGeneration, inputs: dict[str, Any],
                 prompt_logits: torch.Tensor, tokens: torch.Tensor, decode_logits: torch.Tensor,
                 case: str) -> dict[str, float]:
    """The cached decode must agree with the prefill and with one forward over everything.

    Returns both differences (relative to the largest |logit|) for the manifest.
    """
    if not torch.equal(decode_logits.argmax(-1), tokens):
        raise RuntimeError(f"{case}: greedy tokens are not the argmax of their logits")
    if (first := _max_rel_diff(decode_logits[0], prompt_logits[-1])) > DECODE_CHECK_RTOL:
        raise RuntimeError(f"{case}: first decode logits differ from the prefill by {first:.2e}")
    full = dict(inputs)
    fed = tokens[None, :-1]
    full["input_ids"] = torch.cat([inputs["input_ids"], fed], dim=1)
    full["attention_mask"] = torch.ones_like(full["input_ids"])
    full["mm_token_type_ids"] = torch.cat(
        [inputs["mm_token_type_ids"], torch.zeros_like(fed)], dim=1)
    model.model.rope_deltas = None
    recomputed = model(**full, use_cache=False).logits[0, -DECODE_STEPS:]
    if (full_diff := _max_rel_diff(decode_logits, recomputed)) > DECODE_CHECK_RTOL:
        raise RuntimeError(f"{case}: cached decode differs from a full recompute by "
                           f"{full_diff:.2e}")
    return {"first_step_vs_prefill": first, "cached_vs_full_recompute": full_diff}


# --------------------------------------------------------------------------- driver


def load_model(model_dir: Path) -> Qwen3VLForConditionalGeneration:
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = model.config.text_config
    # Greedy, exactly DECODE_STEPS tokens: no eos stop, no sampling settings.
    model.generation_config = GenerationConfig(
        do_sample=False, max_new_tokens=DECODE_STEPS, eos_token_id=None,
        bos_token_id=ids.bos_token_id, pad_token_id=ids.bos_token_id)
    return model


def model_summary(model_dir: Path) -> dict[str, Any]:
    def read(name: str) -> Any:
        return json.loads((model_dir / name).read_text())

    return {"config": read("config.json"),
            "image_size": read("preprocessor_config.json")["size"],
            "video_size": read("video_preprocessor_config.json")["size"],
            "generation_config": read("generation_config.json")}


def save_npz(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def generate(models_dir: Path, out_dir: Path, only: Sequence[str] | None,
             progress: Callable[[str], None]) -> dict[str, Any]:
    model_dirs = sorted(p for p in models_dir.iterdir() if (p / "config.json").is_file())
    if only:
        model_dirs = [p for p in model_dirs if p.name in only]
        if len(model_dirs) != len(set(only)):
            raise SystemExit(f"--only {list(only)}: not all found in {models_dir}")
    if not model_dirs:
        raise SystemExit(f"no checkpoints in {models_dir}; run tools/make_tiny_models.py first")
    images = make_images(out_dir / "images")
    manifest: dict[str, Any] = {
        "generator": "tools/make_golden_fixtures.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "Pillow": PIL.__version__, "numpy": np.__version__},
        "settings": {"dtype": "float32", "attn_implementation": "eager",
                     "image_processor": "Qwen2VLImageProcessorPil", "seed": SEED,
                     "decode_steps": DECODE_STEPS, "video_fps": VIDEO_FPS,
                     "torch_threads": torch.get_num_threads()},
        "images": {name: f"images/{path.name}" for name, path in images.items()},
        "models": {},
    }
    for model_dir in model_dirs:
        torch.manual_seed(SEED)
        model = load_model(model_dir)
        processor = load_processor(model_dir)
        entry: dict[str, Any] = {**model_summary(model_dir), "cases": {}}
        for case in CASES:
            started = time.perf_counter()
            arrays, meta = run_case(model, processor, case, images)
            rel = f"{model_dir.name}/{case.name}.npz"
            save_npz(out_dir / rel, arrays)
            entry["cases"][case.name] = {
                "file": rel,
                "messages": manifest_messages(case),
                **meta,
                "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                           for k, v in arrays.items()},
            }
            progress(f"{model_dir.name}/{case.name}: L={meta['prompt_tokens']} "
                     f"image_tokens={meta['image_tokens']} video_tokens={meta['video_tokens']} "
                     f"max|logit|={meta['max_abs_logit']:.3f} "
                     f"({time.perf_counter() - started:.2f} s)")
        manifest["models"][model_dir.name] = entry
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False)
                                           + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=DEFAULT_MODELS,
                        help="directory of checkpoints from tools/make_tiny_models.py")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture directory")
    parser.add_argument("--only", action="append", default=None,
                        help="only this model (repeatable); the manifest then lists only these")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (results are compared at 1e-5, any count works)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    generate(args.models, args.out, args.only, logger.info)
    logger.info("done in %.1f s", time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
