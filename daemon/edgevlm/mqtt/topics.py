"""Every MQTT topic of the daemon, built and parsed in this one module.

```
<base>/<node>/bridge/{state,info,health,busy,last_answer,event}
<base>/<node>/request/<verb>      -> <base>/<node>/response/<verb>  (without a v5 Response Topic)
$share/<group>/<base>/pool/request/<verb>                           (the shared pool)
<base>/<node>/camera/<cam>/{image,description,snapshot,set,state}
```
"""

from __future__ import annotations

from dataclasses import dataclass

VERBS: tuple[str, ...] = ("describe",)
HA_STATUS_SUFFIX = "status"


def has_wildcards(topic: str) -> bool:
    return "+" in topic or "#" in topic


@dataclass(frozen=True)
class RequestTopic:
    """A parsed request topic: its verb and whether it came through the shared pool."""

    verb: str
    pooled: bool


@dataclass(frozen=True)
class Topics:
    """The topic map of one node under one base topic."""

    base: str
    node: str

    # ------------------------------------------------------------------ building

    @property
    def root(self) -> str:
        return f"{self.base}/{self.node}"

    def bridge(self, name: str) -> str:
        return f"{self.root}/bridge/{name}"

    @property
    def state(self) -> str:
        return self.bridge("state")

    @property
    def info(self) -> str:
        return self.bridge("info")

    @property
    def health(self) -> str:
        return self.bridge("health")

    @property
    def busy(self) -> str:
        return self.bridge("busy")

    @property
    def last_answer(self) -> str:
        return self.bridge("last_answer")

    @property
    def event(self) -> str:
        return self.bridge("event")

    def request(self, verb: str) -> str:
        return f"{self.root}/request/{verb}"

    def response(self, verb: str) -> str:
        return f"{self.root}/response/{verb}"

    def pool_request(self, verb: str) -> str:
        """The topic clients publish pooled requests to."""
        return f"{self.base}/pool/request/{verb}"

    def pool_subscription(self, group: str, verb: str) -> str:
        return f"$share/{group}/{self.pool_request(verb)}"

    def camera(self, camera: str, leaf: str) -> str:
        """``<base>/<node>/camera/<cam>/<leaf>`` (image, description, snapshot, set, state)."""
        return f"{self.root}/camera/{camera}/{leaf}"

    def request_subscriptions(self, shared_group: str | None) -> list[str]:
        """Topic filters for requests: this node's, and the shared pool's unless disabled."""
        filters = [self.request(verb) for verb in VERBS]
        if shared_group:
            filters += [self.pool_subscription(shared_group, verb) for verb in VERBS]
        return filters

    # ------------------------------------------------------------------ parsing

    def parse_request(self, topic: str) -> RequestTopic | None:
        """The verb of a request topic (this node's or the pool's), else None.

        Messages of a shared subscription arrive with the plain topic (no ``$share/...``)."""
        for prefix, pooled in ((f"{self.root}/request/", False),
                               (f"{self.base}/pool/request/", True)):
            if topic.startswith(prefix):
                verb = topic[len(prefix):]
                return RequestTopic(verb, pooled) if verb in VERBS else None
        return None

    def in_namespace(self, topic: str) -> bool:
        """Whether ``topic`` may be published to as a reply: under ``<base>/``, no wildcards,
        and neither a request nor a bridge topic (a reply must never pose as either)."""
        if not topic.startswith(f"{self.base}/") or has_wildcards(topic) or "\0" in topic:
            return False
        if len(topic.encode()) > 65535 or topic == f"{self.base}/":
            return False
        rest = topic[len(self.base):]
        return "/request/" not in rest and "/bridge/" not in rest


def homeassistant_status(prefix: str) -> str:
    """Home Assistant's birth/will topic (``homeassistant/status``)."""
    return f"{prefix}/{HA_STATUS_SUFFIX}"
