"""The YAML configuration, validated by pydantic, with errors that name key, value and line.

Sizes accept an integer number of bytes or a string with a unit (``512 MiB``, ``16MB``).
A bad file is refused whole: :class:`ConfigError` lists every problem as
``limits.max_queue = -1 (line 12): Input should be greater than or equal to 1``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
)

from .limits import MMLimits, RequestLimits
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
        return int(float(match.group(1)) * _UNITS[unit])
    return value


ByteSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0)]
MMLimitsField = Annotated[MMLimits, BeforeValidator(MMLimits.parse),
                          PlainSerializer(lambda v: v.to_json(), return_type=dict)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class ModelConfig(_Section):
    path: str | None = Field(default=None, description="directory with model.gguf + mmproj.gguf; "
                             "absent: the bundled demo model")
    family: str = "qwen3-vl"
    threads: int = Field(default=4, ge=1, le=256)
    context: int = Field(default=4096, ge=256, le=262144)
    min_pixels: int | None = Field(default=None, ge=1)
    max_pixels: int | None = Field(default=1_003_520, ge=1, description="deployment cap on the "
                                   "pixels an image is resized to (~980 tokens for Qwen3-VL)")

    @field_validator("family")
    @classmethod
    def _known_family(cls, value: str) -> str:
        if value not in FAMILIES:
            raise ValueError(f"unknown family {value!r}; use one of {', '.join(FAMILIES)}")
        return value


class LimitsConfig(_Section):
    limit_mm_per_prompt: MMLimitsField = Field(
        default_factory=lambda: MMLimits.parse({"image": 4, "video": 1}))
    max_payload_bytes: ByteSize = 16 * 2**20
    max_part_bytes: ByteSize = 8 * 2**20
    max_video_frames: int = Field(default=32, ge=1, le=768)
    max_queue: int = Field(default=8, ge=1)
    default_deadline_ms: int | None = Field(default=120_000, ge=1)

    def request_limits(self) -> RequestLimits:
        return RequestLimits(self.limit_mm_per_prompt, self.max_payload_bytes,
                             self.max_part_bytes, self.max_video_frames)


ImageFormat = Literal["JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"]
DEFAULT_FORMATS: list[ImageFormat] = ["JPEG", "PNG", "WEBP", "BMP"]


class MediaConfig(_Section):
    formats: list[ImageFormat] = Field(default_factory=lambda: list(DEFAULT_FORMATS))
    max_image_pixels: int = Field(default=40_000_000, ge=1)

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


class MQTTConfig(_Section):
    host: str | None = None
    port: int = Field(default=1883, ge=1, le=65535)
    username: str | None = None
    password: str | None = None
    tls: TLSConfig | None = None
    base_topic: str = Field(default="edgevlm", pattern=r"^[^#+$/][^#+]*$")
    node_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]+$")
    client_id: str | None = None
    keepalive: int = Field(default=60, ge=5, le=65535)
    protocol: Literal[5, "5", "3.1.1"] = 5


class Config(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    mqtt: MQTTConfig = Field(default_factory=MQTTConfig)


class ConfigError(ValueError):
    """The configuration is invalid; ``problems`` lists each with path, value and line."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid configuration in {source}:\n{lines}")


def _line_map(node: yaml.Node, path: tuple[str | int, ...], out: dict[tuple[str | int, ...], int]
              ) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            out[child] = key.start_mark.line + 1
            _line_map(value, child, out)
            out[child] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, (*path, i), out)


def _line_of(loc: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def validate_config(data: Any, source: str = "config",
                    lines: dict[tuple[str | int, ...], int] | None = None) -> Config:
    """Validate a parsed config mapping; :class:`ConfigError` lists every problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the file must be a mapping of sections, got "
                                   f"{type(data).__name__}"])
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (
                "[" in p or p in ("function-before", "int", "str", "literal"))))
            key = ".".join(str(p) for p in loc) or "(top level)"
            line = _line_of(loc, lines or {})
            where = f" (line {line})" if line else ""
            value = "" if err["type"] == "missing" else f" = {err.get('input')!r}"
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key; check the spelling against etc/edgevlm.yaml"
            problems.append(f"{key}{value}{where}: {message}")
        raise ConfigError(source, problems) from None


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror}"]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"not valid YAML: {exc}"]) from None
    lines: dict[tuple[str | int, ...], int] = {}
    if node is not None:
        _line_map(node, (), lines)
    return validate_config(data, source, lines)
