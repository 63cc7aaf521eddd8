"""The HTTP front door of a daemon, built from its config and its parts (imports aiohttp:
called only when ``http.enabled`` is set)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from ...config import Config
from ...engine import Engine
from ...engine.quantisation import quantisation_name
from ...metrics import Metrics
from ...pipeline.admission import RequestSide
from ...pipeline.cache import VisionCache
from ...pipeline.image_refs import ImageRefs
from ...pipeline.jobs import JobQueue, RequestJob
from .media_fetch import MediaFetcher
from .ollama_api import ModelCard
from .server import HttpFrontDoor
from .submit import Submitter


def model_card(config: Config, engine: Engine) -> ModelCard:
    files = [p for p in (engine.files.text, engine.files.mmproj) if p is not None]
    modified = max(p.stat().st_mtime for p in files)
    return ModelCard(
        name=config.http.model_name or engine.name, family=engine.architecture.architecture,
        context=engine.context, size=sum(p.stat().st_size for p in files),
        quantization=quantisation_name(engine.model),
        digest=engine.facts.fingerprint,
        modified_at=datetime.fromtimestamp(modified, UTC).isoformat().replace("+00:00", "Z"))


def build_http_door(config: Config, engine: Engine, queue: JobQueue, metrics: Metrics, *,
                    side: Callable[[], RequestSide], refs: ImageRefs,
                    serving: Callable[[], bool],
                    abandon: Callable[[RequestJob], None]) -> HttpFrontDoor:
    submitter = Submitter(side, queue, metrics, refs, config.limits.default_deadline_ms,
                          abandon)
    return HttpFrontDoor(config.http, submitter, model_card(config, engine),
                         max_body_bytes=config.limits.max_payload_bytes, serving=serving,
                         default_max_tokens=config.http.default_max_tokens,
                         fetcher=MediaFetcher(config.http.allowed_media_domains,
                                              config.limits.max_part_bytes,
                                              config.http.media_fetch_timeout_s),
                         cache_stats=lambda: (engine.cache.stats()
                                              if isinstance(engine.cache, VisionCache) else None))
