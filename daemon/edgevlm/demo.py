"""``edgevlm demo``: sample camera requests through the request side, one line each.

Until the engine and the daemon exist this shows admission (schema, limits, token budget from
headers), media preparation (decode, resize, patchify, cache keys) and the wire answer each
request would get when it is refused. Sample frames are drawn with Pillow and encoded as real
JPEG/PNG files.
"""

from __future__ import annotations

import base64
import io
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from .admission import RequestSide, admit
from .cache import VisionCache
from .config import Config
from .errors import wire_error
from .preflight import PreflightContext
from .prepare import ModelFacts, prepare_media
from .tokenizer import ByteCountTokenizer
from .vision.sizing import get_family
from .vision_tokens import encode_vision_tokens

DEMO_HIDDEN, DEMO_DEEPSTACK = 2048, 3  # Qwen3-VL-2B's LLM width and DeepStack depth


def draw_scene(width: int, height: int, seed: int, fmt: str = "JPEG") -> bytes:
    """A camera-like frame: sky, ground, a car and a person, encoded as a real file."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), (120, 170, 220))
    draw = ImageDraw.Draw(img)
    draw.rectangle([0, height * 2 // 3, width, height], fill=(90, 120, 70))
    cx = int(rng.integers(width // 8, width // 2))
    draw.rectangle([cx, height // 2, cx + width // 4, height * 3 // 4], fill=(200, 30, 30))
    px = int(rng.integers(width // 2, width * 7 // 8))
    head = width // 20
    draw.ellipse([px, height // 3, px + head, height // 3 + head], fill=(230, 190, 150))
    draw.rectangle([px, height // 3 + width // 20, px + width // 20, height * 3 // 4],
                   fill=(40, 40, 120))
    buf = io.BytesIO()
    img.save(buf, fmt, **({"quality": 88} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _url(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _request(rid: str, *parts: dict[str, Any], **fields: Any) -> bytes:
    return json.dumps({"v": 1, "id": rid, "messages": [
        {"role": "user", "content": list(parts)}], **fields}).encode()


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def _img(data: bytes, mime: str = "image/jpeg") -> dict[str, Any]:
    return {"type": "image", "image": _url(data, mime)}


def sample_requests() -> list[tuple[str, bytes]]:
    door = draw_scene(1280, 720, 1)
    rng = np.random.default_rng(7)
    feats = rng.standard_normal((4, DEMO_HIDDEN), dtype=np.float32)
    ds = rng.standard_normal((DEMO_DEEPSTACK, 4, DEMO_HIDDEN), dtype=np.float32)
    from .features import VisionFeatures

    vt = encode_vision_tokens(VisionFeatures(feats, ds, (1, 2, 2)))
    short_vt = dict(vt, tokens_b64=base64.b64encode(feats.tobytes()[:-4]).decode())
    clip = [_url(draw_scene(320, 240, s)) for s in range(4)]
    return [
        ("front door, 1280x720 JPEG", _request("door-1", _img(door), _text("Who is at the door?"))),
        ("driveway, 640x480 PNG", _request("drive-1", _img(draw_scene(640, 480, 2, "PNG"),
                                                         "image/png"), _text("Any cars?"))),
        ("portrait 1080x1920 + 1280x720", _request(
            "two-1", _img(draw_scene(1080, 1920, 3)), _img(door), _text("What changed?"))),
        ("4-frame clip @ 2 fps", _request("clip-1", {"type": "video_frames",
                                                      "video_frames": clip, "fps": 2},
                                          _text("What moved?"))),
        ("vision_tokens n=4 d=2048 ds=3", _request("vt-1", {"type": "vision_tokens",
                                                             "vision_tokens": vt},
                                                   _text("Describe."))),
        ("5 images (limit 4)", _request("many-1", *[_img(door)] * 5, _text("?"))),
        ("3333x2500 with max_tokens 4000", _request(
            "big-1", _img(draw_scene(3333, 2500, 4)), _text("Describe."), max_tokens=4000,
            mm_processor_kwargs={"max_pixels": 16_777_216})),
        ("truncated JPEG", _request("bad-1", _img(door[: len(door) // 2]), _text("?"))),
        ("vision_tokens one float short", _request(
            "vt-2", {"type": "vision_tokens", "vision_tokens": short_vt}, _text("?"))),
        ("image_ref of an unknown key", _request(
            "ref-1", {"type": "image_ref", "image_ref": "0" * 32}, _text("?"))),
        ("audio part", _request("aud-1", {"type": "input_audio", "input_audio": {}})),
        ("not JSON", b"{oops"),
    ]


def _run_one(payload: bytes, side: RequestSide, facts: ModelFacts, cache: VisionCache
             ) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        admitted = admit(payload, side)
        admitted_ms = (time.perf_counter() - start) * 1e3
        t1 = time.perf_counter()
        prepared = prepare_media(admitted.request, side.preflight, facts, cache)
        media_ms = (time.perf_counter() - t1) * 1e3
    except Exception as exc:  # every refusal goes through the one error mapping
        err = wire_error(exc)
        return {"status": "error", "error": {"code": err.code, "type": err.type,
                                             "message": err.message}}
    return {"status": "admitted", "admission_ms": round(admitted_ms, 2),
            "media_ms": round(media_ms, 1), "budget": admitted.budget.to_json(),
            "media": [{"path": p.path, "kind": p.kind, "cache_key": p.cache_key,
                       "cache_hit": p.cache_hit,
                       "pixel_values": list(p.pixels.pixel_values.shape) if p.pixels else None,
                       "grid_thw": list(p.pixels.grid_thw) if p.pixels else None,
                       "deepstack": p.features.has_deepstack if p.features else None}
                      for p in prepared]}


def _item_summary(item: dict[str, Any]) -> str:
    size = f" {item['width']}x{item['height']}" if "width" in item else ""
    resized = (f" -> {item['resized_width']}x{item['resized_height']}"
               if "resized_width" in item else "")
    return f"{item['kind']}{size}{resized} = {item['tokens']} tok"


def _line(name: str, result: dict[str, Any]) -> str:
    if result["status"] == "error":
        e = result["error"]
        return f"  x {name}\n      {e['code']} {e['type']}: {e['message']}"
    budget = result["budget"]
    items = "; ".join(_item_summary(i) for i in budget["items"])
    return (f"  ok {name}\n      prompt {budget['prompt_tokens']} tokens (text "
            f"{budget['text_tokens']}, vision {budget['vision_tokens']}: {items}); admission "
            f"{result['admission_ms']} ms, media {result['media_ms']} ms")


def run_demo(json_output: bool = False, out: Callable[[str], None] | None = None) -> int:
    write = out or (lambda s: sys.stdout.write(s + "\n"))
    config = Config()
    family = get_family(config.model.family)
    side = RequestSide(config.limits.request_limits(), PreflightContext(
        family=family, context_length=config.model.context, tokenizer=ByteCountTokenizer(),
        media=config.media.policy(), mm=config.limits.limit_mm_per_prompt,
        max_pixels=config.model.max_pixels, min_pixels=config.model.min_pixels))
    facts = ModelFacts("demo-request-side", DEMO_HIDDEN, DEMO_DEEPSTACK)
    cache = VisionCache(config.cache.max_bytes, model_fingerprint=facts.fingerprint)
    if not json_output:
        write("edgevlm demo — the request side (no model loaded yet: text is counted as UTF-8 "
              "bytes, an upper bound)")
        write(f"context {config.model.context} tokens, max_pixels {config.model.max_pixels}, "
              f"limits {config.limits.limit_mm_per_prompt.to_json()}")
    for name, payload in sample_requests():
        result = _run_one(payload, side, facts, cache)
        write(json.dumps({"sample": name, **result}) if json_output else _line(name, result))
    return 0
