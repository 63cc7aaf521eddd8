"""The model-family registry (issue 23): by GGUF ``general.architecture``, one module each."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevlm.engine.families import REGISTRY, family_for
from edgevlm.vision.sizing import FAMILIES

FAMILY_DIR = Path(__file__).resolve().parents[2] / "daemon" / "edgevlm" / "engine" / "families"


def test_every_family_module_is_registered_with_rules_that_exist() -> None:
    modules = {p.stem for p in FAMILY_DIR.glob("*.py")} - {"__init__", "base"}
    assert modules == set(REGISTRY)
    for family in REGISTRY.values():
        assert family.sizing in FAMILIES, family
        assert set(family.markers) == {"image_pad", "video_pad", "vision_start", "vision_end"}


def test_an_unknown_architecture_names_the_supported_ones() -> None:
    assert family_for("qwen3vl").sizing == "qwen3-vl"
    with pytest.raises(ValueError, match="'llama' is not supported; edgevlm runs qwen3vl"):
        family_for("llama")


def test_the_demo_model_is_found_by_its_architecture(demo_engine_loaded: object) -> None:
    engine = demo_engine_loaded
    assert engine.architecture is REGISTRY["qwen3vl"]  # type: ignore[attr-defined]
    assert engine.family.name == "qwen3-vl"  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def demo_engine_loaded() -> object:
    from edgevlm.engine import Engine
    from edgevlm.models import demo_model_dir

    return Engine.load(demo_model_dir(), threads=1)
