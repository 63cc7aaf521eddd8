"""The ``<base>/<node>/bridge/*`` topics: state, info, health, busy, last_answer, event.

```
bridge/state        retained "online" | "offline" (the last will says "offline")
bridge/info         retained: version, model, limits, capabilities, config without secrets
bridge/health       retained Metrics.snapshot(), every mqtt.health_interval_s
bridge/busy         retained "ON" | "OFF" when it changes
bridge/last_answer  retained {"text" (<= 255 chars, HA's state limit), "full_text", ...}
bridge/event        not retained {"event_type": "answer_ready", ...} (HA event entity)
```

Every client of the documented ACL reads the bridge topics: ``last_answer`` and ``event`` carry
camera descriptions, and request answers only with ``mqtt.share_request_answers`` (the worker
decides; a request's answer otherwise goes to its requester alone).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ... import __version__
from ...config import Config
from ...engine import Engine
from ...engine.quantisation import quantisation_name
from ...metrics import Metrics
from ...pipeline.cache import VisionCache
from ...pipeline.worker import Answered
from .periodic import PeriodicThread
from .replies import Replier
from .topics import VERBS, Topics

log = logging.getLogger(__name__)

HA_STATE_MAX = 255          # Home Assistant drops a longer entity state
HA_ATTRIBUTES_MAX = 16_000  # attributes beyond ~16 KiB are not stored


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def info_payload(config: Config, engine: Engine, topics: Topics) -> dict[str, Any]:
    mqtt = config.mqtt
    return {
        "version": __version__,
        "node_id": topics.node,
        "model": {"name": engine.name, "family": engine.family.name,
                  "quantisation": quantisation_name(engine.model),
                  "context": engine.context},
        "limits": config.limits.model_dump(mode="json"),
        "capabilities": {
            "verbs": list(VERBS), "stream": True, "pool": mqtt.shared_group is not None,
            "pool_group": mqtt.shared_group,
            "protocol": str(mqtt.protocol),
            "parts": ["text", "image", "image_url", "video_frames", "vision_tokens",
                      "image_ref"],
            "cameras": sorted(config.cameras),
        },
        "topics": {
            "request": topics.request("describe"),
            "response": topics.response("describe"),
            "pool_request": topics.pool_request("describe") if mqtt.shared_group else None,
        },
        "config": config.redacted(),
    }


def last_answer_payload(answer: Answered) -> dict[str, Any]:
    return {"text": answer.text[:HA_STATE_MAX], "full_text": answer.text[:HA_ATTRIBUTES_MAX],
            "model": answer.model, "id": answer.request_id, "camera": answer.camera,
            "finish_reason": answer.finish_reason, "at": _now()}


def event_payload(answer: Answered) -> dict[str, Any]:
    return {"event_type": "answer_ready", "text": answer.text[:HA_ATTRIBUTES_MAX],
            "id": answer.request_id, "camera": answer.camera, "model": answer.model}


class Bridge:
    """Publishes the bridge topics; the health loop runs on its own thread."""

    def __init__(self, topics: Topics, replier: Replier, metrics: Metrics, engine: Engine,
                 health_interval_s: float) -> None:
        self.topics = topics
        self.replier = replier
        self.metrics = metrics
        self.engine = engine
        self.health_interval_s = health_interval_s
        # more of bridge/health from outside the metrics (the service: serving, problem)
        self.health_extra: Callable[[dict[str, Any]], None] | None = None
        self._thread = PeriodicThread("edgevlm-health", health_interval_s, self._health_tick,
                                      log=log, failure="publishing health failed")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _json(self, topic: str, obj: dict[str, Any], retain: bool) -> None:
        self.replier.publish(topic, json.dumps(obj, separators=(",", ":")), retain=retain)

    def publish_info(self, info: dict[str, Any]) -> None:
        self._json(self.topics.info, info, retain=True)

    def publish_health(self) -> None:
        cache = self.engine.cache
        health = self.metrics.snapshot(cache.stats() if isinstance(cache, VisionCache) else None)
        if self.health_extra is not None:
            self.health_extra(health)
        self._json(self.topics.health, health, retain=True)

    def publish_busy(self, busy: bool) -> None:
        self.replier.publish(self.topics.busy, "ON" if busy else "OFF", retain=True)

    def publish_answer(self, answer: Answered) -> None:
        self._json(self.topics.last_answer, last_answer_payload(answer), retain=True)
        self._json(self.topics.event, event_payload(answer), retain=False)

    def _health_tick(self) -> None:
        if self.replier.link.connected:
            self.publish_health()
