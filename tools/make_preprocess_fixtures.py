"""Write the image files and transformers reference tensors of the preprocessing parity tests.

Needs the ``[reference]`` extra (transformers >= 5 and torch; torchvision must NOT be
installed, or at least is not used: the image reference is built with
``Qwen2VLImageProcessorPil`` directly, the class ``AutoImageProcessor`` picks when torchvision
is absent, so the resize is Pillow's BICUBIC as in edgevlm).

    .venv/bin/python tools/make_preprocess_fixtures.py               # references only
    .venv/bin/python tools/make_preprocess_fixtures.py --write-images  # also (re)create images

Outputs:

- ``tests/fixtures/images/*``: small images (PNG, JPEG, one with EXIF orientation 6, RGBA,
  a strongly non-square one, 5 video frames). Generated from a fixed seed; JPEG bytes depend
  on the libjpeg build, so they are only rewritten with ``--write-images``.
- ``tests/fixtures/preprocess/<case>.npz``: ``pixel_values`` (float32) and ``grid_thw``
  (int64), compressed, and ``manifest.json`` with every case's parameters and the
  transformers / Pillow / numpy / torch versions.

Images are loaded with ``transformers.image_utils.load_image`` (EXIF transpose, then
``convert("RGB")``) and processed with Qwen3-VL settings (patch 16, merge 2, temporal 2,
mean = std = 0.5) and per-case ``min_pixels``/``max_pixels`` small enough to keep arrays small.

Video: transformers' ``Qwen3VLVideoProcessor`` resizes and normalises with torchvision, which
is not installable here (no CPU wheel for this torch), so the video reference is composed from
transformers' own pieces: ``video_processing_qwen3_vl.smart_resize`` for the size, Pillow
BICUBIC for the resize (edgevlm's choice; torchvision's antialiased bicubic differs by about
one level), torchvision's fused rescale + normalise ``(x - 127.5) / 127.5`` in float32 (what
``TorchvisionBackend.rescale_and_normalize`` computes) for the values, and
``Qwen3VLVideoProcessor.patchify`` (torch) for the layout and temporal padding.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
IMAGES_DIR = ROOT / "tests" / "fixtures" / "images"
PREPROCESS_DIR = ROOT / "tests" / "fixtures" / "preprocess"

PATCH_SIZE = 16
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)
VIDEO_FRAMES = [f"video_frame_{k}.png" for k in range(5)]


@dataclass(frozen=True)
class ImageCase:
    """One reference: an image file and the pixel bounds it is processed with."""

    name: str
    file: str
    min_pixels: int
    max_pixels: int


IMAGE_CASES = (
    ImageCase("png_128x96_upscaled", "rgb_128x96.png", 32_768, 16_777_216),
    ImageCase("png_128x96_native", "rgb_128x96.png", 1_024, 16_777_216),
    ImageCase("jpeg_100x100_upscaled", "rgb_100x100.jpg", 16_384, 16_777_216),
    ImageCase("png_200x33_wide", "rgb_200x33.png", 4_096, 16_777_216),
    ImageCase("jpeg_exif6_ties_to_even", "exif6_120x80.jpg", 4_096, 16_777_216),
    ImageCase("jpeg_640x480_downscaled", "rgb_640x480.jpg", 1_024, 32_768),
    ImageCase("png_48x400_tall_clamped", "rgb_48x400.png", 1_024, 4_096),
    ImageCase("png_rgba_96x64", "rgba_96x64.png", 4_096, 16_777_216),
)
VIDEO_MIN_PIXELS = 4_096
VIDEO_MAX_PIXELS = 40_000


def natural_image(width: int, height: int, seed: int, channels: int = 3) -> np.ndarray:
    """A photo-like uint8 [H, W, C] array: gradients, stripes, a disc and mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = [
        255 * x / max(width - 1, 1),
        255 * y / max(height - 1, 1),
        127 + 100 * np.sin(x / 7.0 + y / 11.0 + seed),
        255 * ((x + y) % 32 < 16),
    ]
    disc = (x - width * 0.6) ** 2 + (y - height * 0.4) ** 2 < (min(width, height) * 0.25) ** 2
    planes = [np.where(disc, 255 - base[c], base[c]) for c in range(channels)]
    pixels = np.stack(planes, axis=-1) + rng.normal(0, 6, (height, width, channels))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def write_images(images_dir: Path) -> None:
    """(Re)create every image file from fixed seeds."""
    images_dir.mkdir(parents=True, exist_ok=True)
    Image.fromarray(natural_image(128, 96, 1)).save(images_dir / "rgb_128x96.png")
    Image.fromarray(natural_image(100, 100, 2)).save(images_dir / "rgb_100x100.jpg", quality=90)
    Image.fromarray(natural_image(200, 33, 3)).save(images_dir / "rgb_200x33.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
    Image.fromarray(natural_image(120, 80, 4)).save(images_dir / "exif6_120x80.jpg",
                                                     quality=90, exif=exif.tobytes())
    Image.fromarray(natural_image(640, 480, 5)).save(images_dir / "rgb_640x480.jpg", quality=85)
    Image.fromarray(natural_image(48, 400, 6)).save(images_dir / "rgb_48x400.png")
    Image.fromarray(natural_image(96, 64, 7, channels=4), "RGBA").save(
        images_dir / "rgba_96x64.png")
    for k, name in enumerate(VIDEO_FRAMES):
        frame = np.roll(natural_image(128, 96, 8), shift=6 * k, axis=1)
        Image.fromarray(frame).save(images_dir / name)


def image_reference(path: Path, case: ImageCase) -> tuple[np.ndarray, np.ndarray]:
    """transformers' PIL-path ``pixel_values`` and ``image_grid_thw`` of one image."""
    from transformers.image_utils import load_image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    processor = Qwen2VLImageProcessorPil(
        patch_size=PATCH_SIZE, merge_size=MERGE_SIZE, temporal_patch_size=TEMPORAL_PATCH_SIZE,
        image_mean=list(MEAN), image_std=list(STD),
        size={"shortest_edge": case.min_pixels, "longest_edge": case.max_pixels})
    assert processor.backend == "pil", processor.backend
    out = processor(images=[load_image(str(path))], return_tensors="np")
    return np.asarray(out["pixel_values"]), np.asarray(out["image_grid_thw"])


def video_reference(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """Composite transformers reference of a clip (see the module docstring)."""
    import torch
    from transformers.image_utils import load_image
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
        Qwen3VLVideoProcessor,
        smart_resize,
    )

    frames = [load_image(str(p)) for p in paths]
    width, height = frames[0].size
    resized_h, resized_w = smart_resize(
        len(frames), height, width, temporal_factor=TEMPORAL_PATCH_SIZE,
        factor=PATCH_SIZE * MERGE_SIZE, min_pixels=VIDEO_MIN_PIXELS, max_pixels=VIDEO_MAX_PIXELS)
    arrays = []
    for frame in frames:
        resized = frame.resize((resized_w, resized_h), Image.Resampling.BICUBIC)
        chw = np.asarray(resized).transpose(2, 0, 1).astype(np.float32)
        # torchvision's fused rescale + normalise, as TorchvisionBackend does it
        mean255 = np.asarray([m * 255.0 for m in MEAN], np.float32)[:, None, None]
        std255 = np.asarray([s * 255.0 for s in STD], np.float32)[:, None, None]
        arrays.append((chw - mean255) / std255)
    videos = torch.from_numpy(np.stack(arrays)[None])  # [B, T, C, H, W]
    processor = Qwen3VLVideoProcessor()
    patches, grid_t, grid_h, grid_w = processor.patchify(
        videos, patch_size=PATCH_SIZE, merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE)
    return patches[0].numpy(), np.asarray([[grid_t, grid_h, grid_w]], dtype=np.int64)


def versions() -> dict[str, str]:
    import PIL
    import torch
    import transformers

    return {"transformers": transformers.__version__, "Pillow": PIL.__version__,
            "numpy": np.__version__, "torch": torch.__version__}


def write_references(images_dir: Path, out_dir: Path) -> dict[str, object]:
    """Write one ``.npz`` per case and ``manifest.json`` into ``out_dir``; returns the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cases: list[dict[str, object]] = []
    for case in IMAGE_CASES:
        pixel_values, grid = image_reference(images_dir / case.file, case)
        np.savez_compressed(out_dir / f"{case.name}.npz", pixel_values=pixel_values,
                            grid_thw=grid)
        cases.append({"kind": "image", **asdict(case), "grid_thw": grid[0].tolist(),
                      "npz": f"{case.name}.npz"})
    pixel_values, grid = video_reference([images_dir / name for name in VIDEO_FRAMES])
    np.savez_compressed(out_dir / "video_5_frames.npz", pixel_values=pixel_values,
                        grid_thw=grid)
    cases.append({"kind": "video", "name": "video_5_frames", "files": VIDEO_FRAMES,
                  "min_pixels": VIDEO_MIN_PIXELS, "max_pixels": VIDEO_MAX_PIXELS,
                  "grid_thw": grid[0].tolist(), "npz": "video_5_frames.npz",
                  "note": "composite reference: Pillow resize, torchvision-form fused normalize, "
                          "Qwen3VLVideoProcessor.patchify"})
    manifest: dict[str, object] = {
        "family": "qwen3-vl", "patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE, "image_mean": list(MEAN),
        "image_std": list(STD), "versions": versions(), "cases": cases}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-images", action="store_true",
                        help="(re)create the image files before computing references")
    parser.add_argument("--images-dir", type=Path, default=IMAGES_DIR)
    parser.add_argument("--out-dir", type=Path, default=PREPROCESS_DIR)
    args = parser.parse_args(argv)
    if args.write_images:
        write_images(args.images_dir)
    manifest = write_references(args.images_dir, args.out_dir)
    for case in manifest["cases"]:  # type: ignore[attr-defined]
        print(f"{case['name']:28s} grid {case['grid_thw']}")
    total = sum(p.stat().st_size for d in (args.images_dir, args.out_dir) for p in d.iterdir())
    print(f"fixtures: {total / 1e6:.2f} MB in {args.images_dir} and {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
