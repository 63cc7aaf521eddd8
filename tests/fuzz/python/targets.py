"""The four Python fuzz targets and their properties, shared by the hypothesis tests
(tests/reliability/test_fuzz_parsers.py) and the atheris harnesses (tests/fuzz/python/).

Each ``check_*`` takes the raw bytes an attacker controls and asserts the parser's promise:
the input either parses to a valid object, or raises the error type its callers catch, with a
message that says something. Any other exception escapes and is the finding.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from edgevlm.config import Config, ConfigError, load_config
from edgevlm.engine.families.qwen3vl import render_segments as qwen3vl_chat
from edgevlm.pipeline.admission import RequestSide, admit
from edgevlm.pipeline.limits import MMLimits, RequestLimits
from edgevlm.pipeline.preflight import PreflightContext
from edgevlm.sources.cameras import CameraFrame, CameraSources, FrigateEvent
from edgevlm.tokenizer import ByteCountTokenizer
from edgevlm.vision.sizing import get_family
from edgevlm.wire.errors import EdgevlmError, InvalidVisionTokens, PayloadTooLarge, wire_error
from edgevlm.wire.protocol import VisionTokensPayload, error_answer_json

TARGETS = ("request", "vision_tokens", "config", "frigate")
CORPUS = Path(__file__).resolve().parents[2] / "reliability" / "corpus"

# ------------------------------------------------------------------------------ request

HIDDEN_SIZE, DEEPSTACK_LAYERS = 8, 2


@cache
def request_side() -> RequestSide:
    """A small deployment: 2 images, 64 KB payloads, a 2048-token context."""
    mm = MMLimits.parse({"image": 2, "video": 1})
    ctx = PreflightContext(family=get_family("qwen3-vl"), context_length=2048,
                           chat_template=qwen3vl_chat,
                           tokenizer=ByteCountTokenizer(), mm=mm, max_pixels=200_000)
    return RequestSide(RequestLimits(mm=mm, max_payload_bytes=1 << 16, max_part_bytes=1 << 15,
                                     max_video_frames=4), ctx)


def check_request(data: bytes) -> None:
    """The MQTT request admission (what ``mqtt/requests.py`` runs on the network thread):
    admitted, or an :class:`EdgevlmError` that is not ``internal`` and whose error answer is
    valid JSON echoing the id."""
    try:
        admitted = admit(data, request_side())
    except EdgevlmError as exc:
        err = wire_error(exc)
        assert err.type != "internal" and err.message.strip(), (err, data[:200])
        answer = json.loads(error_answer_json(exc.request_id, err.code, err.type, err.message))
        assert answer["error"]["type"] == err.type and answer.get("id") == _json_echo(
            exc.request_id), answer
        return
    budget = admitted.budget
    assert budget.prompt_tokens + budget.max_tokens <= budget.context, budget
    assert admitted.request.messages and sum(admitted.counts.values()) <= 3


def _json_echo(request_id: str | None) -> str | None:
    """The id as a JSON round trip gives it back (lone surrogates survive as themselves)."""
    return None if request_id is None else json.loads(json.dumps(request_id))


# ------------------------------------------------------------------------------ vision_tokens

MAX_PART_BYTES = 1 << 18


def check_vision_tokens(data: bytes) -> None:
    """The ``vision_tokens`` object of a request, parsed like the request parser does, then
    decoded the way the worker does: features of the promised shape (bit-exact for f32), or
    :class:`InvalidVisionTokens` / :class:`PayloadTooLarge` with a message."""
    try:
        payload = VisionTokensPayload.model_validate_json(data)
    except ValidationError as exc:  # the request parser answers it (check_request fuzzes that)
        assert exc.errors(include_url=False)
        return
    from edgevlm.wire.vision_tokens import decode_vision_tokens

    try:
        features = decode_vision_tokens(payload, HIDDEN_SIZE, DEEPSTACK_LAYERS,
                                        max_bytes=MAX_PART_BYTES)
    except (InvalidVisionTokens, PayloadTooLarge) as exc:
        assert exc.message.strip() and str(exc) == exc.message, exc
        return
    gt, gh, gw = payload.grid
    n = gt * gh * gw
    assert features.grid == (gt, gh, gw) and features.embeddings.shape == (n, HIDDEN_SIZE)
    assert np.isfinite(features.embeddings).all()
    k = DEEPSTACK_LAYERS if payload.layout == "packed" or payload.ds_b64 else 0
    assert features.deepstack_layers == k
    if features.deepstack is not None:
        assert features.deepstack.shape == (k, n, HIDDEN_SIZE)
        assert np.isfinite(features.deepstack).all()
    if payload.dtype == "f32" and payload.layout == "separate":
        raw = binascii.a2b_base64(payload.tokens_b64, strict_mode=True)
        assert features.embeddings.tobytes() == raw


# ------------------------------------------------------------------------------ config

_PROBLEM_WITH_LINE = re.compile(r" \(line \d+\): \S")
_OTHER_PROBLEMS = ("not valid YAML", "not UTF-8 text", "the file must be a mapping", "!secret ",
                   "!env ")


@cache
def _config_dir() -> Path:
    """A directory with a secrets.yaml beside the config file the target writes."""
    # In memory where there is a tmpfs: rewriting a file on ext4 costs ~0.5 ms, half of what
    # the whole load_config takes, on /dev/shm ~0.06 ms.
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="edgevlm-fuzz-config-", dir=shm))
    (path / "secrets.yaml").write_text("mqtt_password: s3cret\nport: '1884'\n",
                                       encoding="utf-8")
    return path


def check_config(data: bytes) -> None:
    """YAML text → Config through ``load_config`` (file, ``!secret``, ``!env``): a Config, or
    :class:`ConfigError` whose every problem names the key, the value and the line."""
    path = _config_dir() / "edgevlm.yaml"
    path.write_bytes(data)
    try:
        config = load_config(path, env={"EDGEVLM_FUZZ_HOST": "broker.local"})
    except ConfigError as exc:
        assert exc.problems and str(exc).startswith("invalid configuration in "), exc
        for problem in exc.problems:
            assert problem.strip(), exc.problems
            if not problem.startswith(_OTHER_PROBLEMS) and "cannot read the file" not in problem:
                assert _PROBLEM_WITH_LINE.search(problem), problem
        return
    assert isinstance(config, Config)
    assert "s3cret" not in json.dumps(config.redacted())


# ------------------------------------------------------------------------------ frigate

_FRIGATE_CAMERAS = {
    "front": {"frigate": True, "labels": ["person", "car"],
              "label_prompts": {"person": "Who is {sub_label} at the {camera}?"}},
    "yard": {"frigate": True, "frigate_events": ["new", "update", "end"]},
}
JPEG = b"\xff\xd8\xff\xe0" + bytes(60)


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@cache
def _frigate() -> tuple[CameraSources, list[CameraFrame], _ErrorLog]:
    config = Config.model_validate({"cameras": _FRIGATE_CAMERAS})
    frames: list[CameraFrame] = []
    sources = CameraSources(config.cameras, "edgevlm", "fuzz", frames.append,
                            snapshot_wait_s=60.0)
    for camera, label in (("front", "person"), ("yard", "dog")):
        sources.handle(f"frigate/{camera}/{label}/snapshot", JPEG)
    errors = _ErrorLog()
    logging.getLogger("edgevlm.sources.cameras").addHandler(errors)
    return sources, frames, errors


def check_frigate(data: bytes) -> None:
    """A message on ``frigate/events``: parsed by :class:`FrigateEvent` (or refused with a
    ValidationError), then routed through the real :class:`CameraSources` without an
    unexpected exception (``handle`` logs one at ERROR: that is the finding)."""
    try:
        event: FrigateEvent | None = FrigateEvent.model_validate_json(data)
    except ValidationError as exc:
        assert exc.errors(include_url=False)
        event = None
    sources, frames, errors = _frigate()
    frames.clear()
    errors.records.clear()
    assert sources.handle("frigate/events", data) == []
    assert not errors.records, [r.getMessage() for r in errors.records]
    for frame in frames:
        assert event is not None and frame.camera == event.after.camera
        assert frame.event_id == event.after.id and isinstance(frame.prompt, str)
        assert frame.image == JPEG


CHECKS: dict[str, Callable[[bytes], None]] = {
    "request": check_request,
    "vision_tokens": check_vision_tokens,
    "config": check_config,
    "frigate": check_frigate,
}


def seeds(target: str) -> list[bytes]:
    """The committed corpus of ``target`` (tests/reliability/corpus/<target>/), sorted."""
    return [p.read_bytes() for p in sorted((CORPUS / target).iterdir()) if p.is_file()]


def json_seeds(target: str) -> list[Any]:
    """The corpus entries of ``target`` that are JSON, parsed."""
    out = []
    for data in seeds(target):
        try:
            out.append(json.loads(data))
        except ValueError:
            continue
    return out


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
