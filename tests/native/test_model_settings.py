"""``model.min_pixels`` and ``model.family`` do what etc/edgevlm.yaml says (issue 19: both
were validated and documented, and nothing read them)."""

from __future__ import annotations

import pytest

from edgevlm.config import default_config
from edgevlm.engine import Engine
from edgevlm.engine.engine import _normalise_messages
from edgevlm.models import demo_model_dir
from edgevlm.pipeline.preflight import preflight, preflight_context
from edgevlm.service import load_engine
from edgevlm.wire.protocol import parse_request
from tests.helpers import image_bytes


def _answer_usage(engine: Engine, image: bytes) -> tuple[int, int]:
    """(vision tokens the admission budget counts, vision tokens the answer used)."""
    messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": "How many objects are "
                                              "there?"}]}]
    result = engine.generate(messages, max_tokens=2, temperature=0.0)
    request = parse_request({"messages": _normalise_messages(messages), "max_tokens": 2})
    budget = preflight(request, preflight_context(engine))
    return budget.vision_tokens, result.vision_tokens


def test_min_pixels_upscales_small_images_in_the_budget_and_the_encoder() -> None:
    small = image_bytes(96, 96)  # the demo model's own minimum is 16,384 px: 128x128, 16 tokens
    plain = load_engine(default_config(env=None, overrides={"model.threads": 1}))
    raised = load_engine(default_config(env=None, overrides={"model.threads": 1,
                                                              "model.min_pixels": 30_000}))
    assert plain.min_pixels is None and raised.min_pixels == 30_000
    budget_plain, used_plain = _answer_usage(plain, small)
    budget_raised, used_raised = _answer_usage(raised, small)
    assert used_plain == 16
    assert used_raised > used_plain  # 30,000 px: 192x160 -> 30 tokens
    assert (budget_plain, budget_raised) == (used_plain + 2, used_raised + 2)  # + markers


def test_a_model_of_another_family_refuses_to_start() -> None:
    config = default_config(env=None, overrides={"model.family": "qwen2-vl"})
    with pytest.raises(ValueError, match=r"model.family is 'qwen2-vl' but qwen3vl-demo is a "
                                         r"qwen3-vl model; remove model.family"):
        load_engine(config)
    same = load_engine(default_config(env=None, overrides={"model.family": "qwen3-vl",
                                                            "model.threads": 1}))
    assert same.family.name == "qwen3-vl" and same.files.text.parent == demo_model_dir()
