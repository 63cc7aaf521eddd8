"""The YAML configuration, validated by pydantic, with errors that name key, value and line.

Sizes accept an integer number of bytes or a string with a unit (``512 MiB``, ``16MB``).
Values come from the file (with ``!secret name`` and ``!env VAR``), then environment variables
``EDGEVLM_<SECTION>__<KEY>``, then dotted overrides from command-line flags
(:mod:`edgevlm.config_sources`). A bad configuration is refused whole: :class:`ConfigError`
(:mod:`edgevlm.config_errors`, which also hides secrets) lists every problem as
``limits.max_queue = -1 (line 12): Input should be greater than or equal to 1`` (or
``(from env EDGEVLM_LIMITS__MAX_QUEUE)``).
"""

from __future__ import annotations

import os
import re
import socket
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from .config_errors import ConfigError as ConfigError  # re-exported: imported from here
from .config_errors import redact, validation_problems
from .config_http import HttpConfig
from .config_sources import Loc, RawConfig, apply_env, apply_overrides, read_yaml
from .pipeline.limits import MMLimits, RequestLimits
from .vision.decode import MediaPolicy
from .vision.sizing import FAMILIES

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "k": 1024, "m": 1024**2, "g": 1024**3}
_SIZE = re.compile(r"\A\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*\Z")


def parse_size(value: Any) -> Any:
    """``512 MiB`` -> 536870912; integers pass through (pydantic checks the rest)."""
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if not match or unit not in _UNITS:
            raise ValueError(f"not a size: {value!r}; write bytes (1048576) or a size with a "
                             "unit (1 MiB, 512MB)")
        size = float(match.group(1)) * _UNITS[unit]
        if size >= 2**63:  # also inf: int() of it raises OverflowError, which pydantic lets out
            raise ValueError(f"size {value[:40]!r} is too large; write at most 8 EiB")
        return int(size)
    return value


ByteSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]
MMLimitsField = Annotated[MMLimits, BeforeValidator(MMLimits.parse),
                          PlainSerializer(lambda v: v.to_json(), return_type=dict)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class ModelConfig(_Section):
    path: str | None = Field(default=None, description="directory with model.gguf + mmproj.gguf; "
                             "absent: the bundled demo model")
    family: str | None = Field(default=None, description="the family the model must be "
                               "(qwen3-vl); absent: whatever the model file says. A model of "
                               "another family refuses to start")
    threads: int = Field(default=4, ge=1, le=256)
    context: int = Field(default=4096, ge=256, le=262144)
    precision: Literal["auto", "exact", "fast"] = Field(
        default="auto", description="arithmetic of prefill and the vision tower: exact "
        "(within ~1e-5 of float32), fast (activations rounded as llama.cpp does where the "
        "CPU makes that faster, e.g. AVX-512: ~1.5-2x the prefill speed) or auto (fast for "
        "K-quant and IQ4 weights, exact for F32/F16/BF16/Q8_0/Q4_0)")
    min_pixels: int | None = Field(default=None, ge=1, description="smallest size an image "
                                   "is resized to (raised to at least the model's minimum); "
                                   "a request's mm_processor_kwargs.min_pixels wins")
    max_pixels: int | None = Field(default=1_003_520, ge=1, description="deployment cap on the "
                                   "pixels an image is resized to (~980 tokens for Qwen3-VL)")

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        if value is not None and value not in FAMILIES:
            raise ValueError(f"unknown family {value!r}; use one of {', '.join(FAMILIES)}")
        return value


class LimitsConfig(_Section):
    limit_mm_per_prompt: MMLimitsField = Field(
        default_factory=lambda: MMLimits.parse({"image": 4, "video": 1}))
    max_payload_bytes: ByteSize = 16 * 2**20
    max_part_bytes: ByteSize = 8 * 2**20
    max_text_bytes: ByteSize = Field(default=64 * 2**10, description="UTF-8 bytes of text "
                                     "in one request's messages, refused before tokenizing")
    max_video_frames: int = Field(default=32, ge=1, le=768)
    max_queue: int = Field(default=8, ge=1)
    default_deadline_ms: int | None = Field(default=120_000, ge=1)
    dedupe_window_s: float = Field(default=600, ge=0, description="answers remembered by "
                                   "request id, to answer a redelivered request again")
    dedupe_max_entries: int = Field(default=1024, ge=0)

    def request_limits(self) -> RequestLimits:
        return RequestLimits(self.limit_mm_per_prompt, self.max_payload_bytes,
                             self.max_part_bytes, self.max_video_frames, self.max_text_bytes)


ImageFormat = Literal["JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"]
DEFAULT_FORMATS: list[ImageFormat] = ["JPEG", "PNG", "WEBP", "BMP"]


class MediaConfig(_Section):
    formats: list[ImageFormat] = Field(default_factory=lambda: list(DEFAULT_FORMATS))
    max_image_pixels: int = Field(default=2_097_152, ge=1, description="most pixels decoded "
                                  "per image (a JPEG may declare up to 64x: DCT scaling)")

    def policy(self) -> MediaPolicy:
        return MediaPolicy(frozenset(self.formats), self.max_image_pixels)


class CacheConfig(_Section):
    max_bytes: ByteSize = 512 * 2**20
    dir: str | None = None


class TLSConfig(_Section):
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False


def _tls_flag(value: Any) -> Any:
    """``tls: true`` = TLS with the system CAs; ``tls: false`` = no TLS."""
    if value is True or (isinstance(value, str) and value.lower() in ("true", "on", "yes")):
        return {}
    if value is False or (isinstance(value, str) and value.lower() in ("false", "off", "no")):
        return None
    return value


TopicLevel = Annotated[str, StringConstraints(pattern=r"^[^#+/$][^#+/]*$")]
NodeName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+$", max_length=64)]


def sanitise_node_id(name: str) -> str:
    """A host name as a topic level and entity id: ``Garage.local`` -> ``Garage``."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name.split(".")[0])[:64].strip("_")
    return cleaned or "edgevlm"


class MQTTConfig(_Section):
    host: str | None = None
    port: int = Field(default=1883, ge=1, le=65535)
    username: str | None = None
    password: str | None = None
    tls: Annotated[TLSConfig | None, BeforeValidator(_tls_flag)] = None
    base_topic: str = Field(default="edgevlm", pattern=r"^[^#+$/][^#+]*$")
    node_id: NodeName | None = None
    client_id: str | None = Field(default=None, min_length=1, max_length=128)
    keepalive: int = Field(default=60, ge=5, le=65535)
    protocol: Literal[5, "5", "3.1.1"] = 5
    shared_group: TopicLevel | None = "edgevlm"
    pool_keepalive_s: int = Field(
        default=2, ge=1, le=60, description="keepalive of the pool connection: the broker "
        "drops a board whose network is cut from the pool 1.5 times this after its last "
        "packet (Mosquitto 2.0: up to 6 s later)")
    will_delay_s: int = Field(default=5, ge=0)
    health_interval_s: float = Field(default=30, gt=0)
    reconnect_min_s: float = Field(default=1, gt=0)
    reconnect_max_s: float = Field(default=5, gt=0)
    clean_start: bool = False
    session_expiry_s: int = Field(default=3600, ge=0)
    reply_prefix: str | None = Field(
        default=None, pattern=r"^[^#+$/][^#+]*/$", description="v5 Response Topics must lie "
        "under this prefix (ending in /); absent: <base_topic>/clients/")
    share_request_answers: bool = Field(
        default=False, description="also publish request answers (text and id) on "
        "bridge/last_answer and bridge/event, which every client may read; camera "
        "descriptions always go there")

    @model_validator(mode="after")
    def _backoff_order(self) -> MQTTConfig:
        if self.reconnect_max_s < self.reconnect_min_s:
            raise ValueError(f"reconnect_max_s ({self.reconnect_max_s:g}) is below "
                             f"reconnect_min_s ({self.reconnect_min_s:g})")
        return self

    def resolved_node_id(self) -> str:
        """``node_id``, or the host name sanitised to ``[A-Za-z0-9_-]``."""
        return self.node_id or sanitise_node_id(socket.gethostname())

    def resolved_client_id(self) -> str:
        """``client_id``, or ``edgevlm-<node_id>``."""
        return self.client_id or f"edgevlm-{self.resolved_node_id()}"


class HomeAssistantConfig(_Section):
    discovery: bool = True
    prefix: str = Field(default="homeassistant", pattern=r"^[^#+$/][^#+]*$")
    form: Literal["device", "component"] = "device"


class ZeroconfConfig(_Section):
    enabled: bool = True
    browse_broker: bool = True


PROMPT_FIELDS = ("camera", "label", "sub_label")  # as Frigate's GenAI prompts
FrigateEventType = Literal["new", "update", "end"]


def _default_frigate_events() -> list[FrigateEventType]:
    return ["end"]


def _check_prompt(prompt: str) -> str:
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(prompt) if name is not None]
    except ValueError as exc:
        raise ValueError(f"bad placeholder: {exc}; write {{camera}}, {{label}} or "
                         "{sub_label}, and {{ }} for a literal brace") from None
    for name in fields:
        if name not in PROMPT_FIELDS:
            raise ValueError(f"unknown placeholder {{{name}}}; use {{camera}}, {{label}} or "
                             "{sub_label}")
    return prompt


Prompt = Annotated[str, BeforeValidator(lambda v: _check_prompt(v) if isinstance(v, str) else v)]


def _topic_filter(value: Any) -> Any:
    """An MQTT subscription filter: ``+`` only as a whole level, ``#`` only as the last."""
    if isinstance(value, str):
        levels = value.split("/")
        for i, level in enumerate(levels):
            if ("+" in level and level != "+") or ("#" in level and (
                    level != "#" or i != len(levels) - 1)):
                raise ValueError(f"not a valid MQTT topic filter: {value!r}; + must be a whole "
                                 "level and # the whole last level")
        if not value or value.startswith("$"):
            raise ValueError("a camera topic must not be empty or start with $")
    return value


TopicFilter = Annotated[str, BeforeValidator(_topic_filter)]


class CameraConfig(_Section):
    enabled: bool = True
    topic: TopicFilter | None = Field(default=None, description="raw JPEG/PNG frames (a "
                                      "filter: + and # allowed); absent: "
                                      "<base>/<node>/camera/<cam>/image")
    frigate: bool = False
    frigate_prefix: str = "frigate"
    frigate_events: list[FrigateEventType] = Field(default_factory=_default_frigate_events)
    labels: list[str] | None = None
    prompt: Prompt = "Describe what the {camera} camera sees."
    label_prompts: dict[str, Prompt] = Field(default_factory=dict)
    max_tokens: int = Field(default=64, ge=1, le=4096)
    max_pixels: int | None = Field(
        default=None, ge=1, description="resize this camera's frames to at most this many "
        "pixels (fewer vision tokens: a faster, coarser description; e.g. 230400, the "
        "pixels of 640x360); null: model.max_pixels. Never above model.max_pixels nor below "
        "the model's minimum")
    json_schema: dict[str, Any] | None = Field(
        default=None, description="answer as JSON following this schema (docs/mqtt.md, "
        "Structured answers): the description topic carries it as `value`, and Home "
        "Assistant gets a sensor per top-level field")

    choices: list[str] | None = Field(
        default=None, min_length=2, max_length=32, description="the description is the "
        "choice the model finds most probable (docs/mqtt.md, Choices), e.g. [nobody, person, "
        "vehicle]")

    @model_validator(mode="after")
    def _one_answer_shape(self) -> CameraConfig:
        if self.json_schema is not None and self.choices is not None:
            raise ValueError("set json_schema or choices, not both")
        return self

    @field_validator("json_schema")
    @classmethod
    def _schema_compiles(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from .structured import compile_grammar
            from .wire.errors import InvalidRequest

            try:
                compile_grammar(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from None
        return value


class FrigateConfig(_Section):
    url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$", description="Frigate's "
                            "API (http://frigate:5000, or https://frigate:8971 with a login); "
                            "absent: Frigate events use the MQTT snapshots only")
    username: str | None = Field(default=None, description="log in with POST /api/login "
                                 "(port 8971); absent: no login (port 5000)")
    password: str | None = None
    tls_verify: bool = Field(default=True, description="check Frigate's certificate (https)")
    ca: str | None = Field(default=None, description="CA file for Frigate's certificate")
    timeout_s: float = Field(default=5.0, gt=0, le=120, description="the whole of one API "
                             "call, connect to last byte")
    fetch: Literal["snapshot", "thumbnail"] = Field(
        default="snapshot", description="which image of the event to describe")
    write_description: bool = Field(default=True, description="POST the description back "
                                    "to /api/events/<id>/description")


class Config(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    mqtt: MQTTConfig = Field(default_factory=MQTTConfig)
    homeassistant: HomeAssistantConfig = Field(default_factory=HomeAssistantConfig)
    zeroconf: ZeroconfConfig = Field(default_factory=ZeroconfConfig)
    cameras: dict[NodeName, CameraConfig] = Field(default_factory=dict)
    frigate: FrigateConfig = Field(default_factory=FrigateConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)

    _secret_paths: set[Loc] = PrivateAttr(default_factory=set)
    _secret_values: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def redacted(self) -> dict[str, Any]:
        """The config as JSON data with passwords, keys and every ``!secret``/``!env`` value
        as ``***``."""
        return redact(self.model_dump(mode="json"), (), self._secret_paths,  # type: ignore[no-any-return]
                      self._secret_values)


def _validate(raw: RawConfig, source: str, env: Mapping[str, str] | None,
              overrides: Mapping[str, Any] | None) -> Config:
    if raw.data is None:
        raw.data = {}
    if not isinstance(raw.data, dict):
        raise ConfigError(source, [f"the file must be a mapping of sections, got "
                                   f"{type(raw.data).__name__}"])
    if env is not None:
        apply_env(raw, env)
    if overrides:
        apply_overrides(raw, overrides)
    problems = list(raw.problems)
    config: Config | None = None
    try:
        config = Config.model_validate(raw.data)
    except ValidationError as exc:
        problems += validation_problems(exc, raw)
    if problems or config is None:
        raise ConfigError(source, problems)
    config._secret_paths = set(raw.secret_paths)
    config._secret_values = frozenset(raw.secret_values)
    return config


def validate_config(data: Any, source: str = "config",
                    lines: dict[tuple[str | int, ...], int] | None = None) -> Config:
    """Validate a parsed config mapping; :class:`ConfigError` lists every problem."""
    raw = RawConfig(data=data, origins={k: f"line {v}" for k, v in (lines or {}).items()})
    return _validate(raw, source, None, None)


def load_config(path: str | Path, env: Mapping[str, str] | None = os.environ,
                overrides: Mapping[str, Any] | None = None) -> Config:
    """Read and validate a YAML config file, then apply ``EDGEVLM_*`` env and ``overrides``.

    ``env=None`` ignores the environment (``!env`` then reads ``os.environ``).
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise ConfigError(source, [f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} "
                                   f"(line {line}); save the file as UTF-8"]) from None
    try:
        raw = read_yaml(text, Path(path).parent / "secrets.yaml",
                        os.environ if env is None else env)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    return _validate(raw, source, env, overrides)


def default_config(env: Mapping[str, str] | None = os.environ,
                   overrides: Mapping[str, Any] | None = None) -> Config:
    """The defaults with ``EDGEVLM_*`` env and ``overrides`` applied: running without a file."""
    return _validate(RawConfig(), "defaults (no config file)", env, overrides)
