"""Models shipped inside the edgevlm package.

``qwen3vl-demo``: a tiny Qwen3-VL (text 128 x 4 layers, ViT 64 x 4 blocks with DeepStack)
trained on synthetic camera scenes by ``tools/demo_model/train.py``; it answers short
questions about people, cars, packages, cats and plain shapes (see ``docs/demo-model.md``).
It is the model ``edgevlm demo`` runs when no model is configured.
"""

from __future__ import annotations

from pathlib import Path

DEMO_MODEL_NAME = "qwen3vl-demo"


def demo_model_dir() -> Path:
    """The directory holding the demo model's ``model.gguf`` and ``mmproj.gguf``."""
    return Path(__file__).resolve().parent / DEMO_MODEL_NAME
