"""edgevlm's decode + preprocess against transformers' tensors (tests/fixtures/preprocess).

The fixtures were written by ``tools/make_preprocess_fixtures.py`` with transformers' PIL image
processor (``Qwen2VLImageProcessorPil``, Qwen3-VL settings) on files loaded with
``transformers.image_utils.load_image``; no torch is needed here. The video fixture is a
composite reference (transformers' video smart_resize and patchify, PIL-path normalisation,
Pillow resize), see the tool's docstring. The ``reference`` test regenerates everything with
live transformers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import PIL
import pytest

from edgevlm.vision.decode import MediaPolicy, decode_image
from edgevlm.vision.preprocess import PixelInput, preprocess_image, preprocess_video
from edgevlm.vision.sizing import get_family

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "tests" / "fixtures" / "images"
REFERENCES = ROOT / "tests" / "fixtures" / "preprocess"
MANIFEST: dict[str, Any] = json.loads((REFERENCES / "manifest.json").read_text())
QWEN3 = get_family("qwen3-vl")
CASES = MANIFEST["cases"]


def pillow_major(version: str) -> int:
    return int(version.split(".")[0])


# Pillow 13 changed its resize pass order (spec §3.2): bit-parity needs the same major version.
SAME_PILLOW = pillow_major(PIL.__version__) == pillow_major(MANIFEST["versions"]["Pillow"])
needs_same_pillow = pytest.mark.skipif(
    not SAME_PILLOW, reason=f"fixtures were made with Pillow {MANIFEST['versions']['Pillow']}, "
                            f"this is Pillow {PIL.__version__}")


def ours(case: dict[str, Any], images_dir: Path = IMAGES) -> PixelInput:
    policy = MediaPolicy()
    if case["kind"] == "video":
        frames = [decode_image((images_dir / name).read_bytes(), policy)
                  for name in case["files"]]
        return preprocess_video(frames, QWEN3, case["min_pixels"], case["max_pixels"],
                                MANIFEST["image_mean"], MANIFEST["image_std"])
    image = decode_image((images_dir / case["file"]).read_bytes(), policy)
    return preprocess_image(image, QWEN3, case["min_pixels"], case["max_pixels"],
                            MANIFEST["image_mean"], MANIFEST["image_std"])


def assert_matches(actual: PixelInput, pixel_values: np.ndarray, grid: np.ndarray) -> None:
    assert actual.grid_thw == tuple(int(v) for v in grid[0])
    assert actual.pixel_values.shape == pixel_values.shape
    assert pixel_values.dtype == np.float32
    np.testing.assert_array_max_ulp(actual.pixel_values, pixel_values, maxulp=1)


def test_manifest_matches_the_family_settings() -> None:
    assert (MANIFEST["patch_size"], MANIFEST["merge_size"], MANIFEST["temporal_patch_size"]) \
        == (QWEN3.patch_size, QWEN3.merge_size, QWEN3.temporal_patch_size)
    assert {case["kind"] for case in CASES} == {"image", "video"}


@needs_same_pillow
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_patches_match_transformers_within_one_ulp(case: dict[str, Any]) -> None:
    with np.load(REFERENCES / case["npz"]) as reference:
        assert_matches(ours(case), reference["pixel_values"], reference["grid_thw"])
    assert list(case["grid_thw"]) == list(ours(case).grid_thw)


def _load_tool(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    path = ROOT / "tools" / "make_preprocess_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_preprocess_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.reference
def test_regenerated_references_match_the_committed_ones_and_ours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tool = _load_tool(monkeypatch)
    manifest = tool.write_references(IMAGES, tmp_path)
    assert [case["name"] for case in manifest["cases"]] == [case["name"] for case in CASES]
    for case in manifest["cases"]:
        with np.load(tmp_path / case["npz"]) as fresh:
            assert_matches(ours(case), fresh["pixel_values"], fresh["grid_thw"])
            if SAME_PILLOW:
                with np.load(REFERENCES / case["npz"]) as committed:
                    np.testing.assert_array_max_ulp(fresh["pixel_values"],
                                                    committed["pixel_values"], maxulp=1)
                    assert np.array_equal(fresh["grid_thw"], committed["grid_thw"])


@pytest.mark.reference
def test_decode_matches_transformers_load_image() -> None:
    image_utils = pytest.importorskip("transformers.image_utils")
    for path in sorted(IMAGES.iterdir()):
        expected = image_utils.load_image(str(path))
        actual = decode_image(path.read_bytes(), MediaPolicy())
        assert actual.size == expected.size, path.name
        assert np.array_equal(np.asarray(actual), np.asarray(expected)), path.name
