"""Every MQTT topic of the daemon, built and parsed in this one module.

```
<base>/<node>/bridge/{state,info,health,busy,pool,last_answer,event}
<base>/<node>/request/<verb>      -> <base>/<node>/response/<verb>  (without a v5 Response Topic)
$share/<group>/<base>/pool/request/<verb>                           (the shared pool)
<base>/<node>/camera/<cam>/{image,description,snapshot,set,state}
<base>/clients/<client>/...    replies to a v5 Response Topic (mqtt.reply_prefix)
```
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import paho.mqtt.client as paho

from ...verbs import VERB_NAMES

VERBS: tuple[str, ...] = VERB_NAMES  # edgevlm.verbs: one topic per verb
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
    def pool(self) -> str:
        """Retained: whether this board is in the shared pool, and why not."""
        return self.bridge("pool")

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

    def default_reply_prefix(self) -> str:
        """``<base>/clients/``: where v5 clients get their replies by default."""
        return f"{self.base}/clients/"

    def reserved_filters(self) -> list[str]:
        """What the daemon publishes or subscribes to under its base topic, in any node's
        shape: a reply may never land there (it would pose as state, a camera's description,
        a request, or another node's answer)."""
        return [f"{self.root}/#", f"{self.base}/pool/#",
                *(f"{self.base}/+/{tree}/#" for tree in ("bridge", "request", "response",
                                                         "camera"))]


@dataclass(frozen=True)
class ReplyPolicy:
    """Where answers may go: a v5 Response Topic under ``prefix`` (``mqtt.reply_prefix``,
    default ``<base>/clients/``) that is not ``reserved`` (what the daemon publishes or
    subscribes to: its own tree, every node's bridge/request/response/camera trees, camera
    topics, Home Assistant's discovery prefix), or exactly one of ``defaults`` (this node's
    response topics: where answers go without a Response Topic)."""

    prefix: str
    reserved: tuple[str, ...] = ()
    defaults: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def for_node(cls, topics: Topics, prefix: str | None = None,
                 reserved: Iterable[str] = ()) -> ReplyPolicy:
        prefix = prefix or topics.default_reply_prefix()
        if not prefix.endswith("/"):
            prefix += "/"
        filters = [f.split("/", 2)[2] if f.startswith("$share/") else f
                   for f in (*topics.reserved_filters(), *reserved)]
        return cls(prefix, tuple(dict.fromkeys(filters)),
                   frozenset(topics.response(verb) for verb in VERBS))

    def refusal(self, topic: str) -> str | None:
        """Why ``topic`` may not carry a reply (None: it may)."""
        if topic in self.defaults:
            return None
        if not topic.startswith(self.prefix) or topic == self.prefix:
            return "it is not under the reply prefix"
        if has_wildcards(topic) or "\0" in topic or len(topic.encode()) > 65535:
            return "it has wildcards or is not a valid topic"
        for reserved in self.reserved:
            if paho.topic_matches_sub(reserved, topic):
                return f"the daemon publishes or subscribes there ({reserved})"
        return None

    def requester(self, topic: str) -> str:
        """Who a reply route belongs to: ``<prefix><first level>`` (the tree the broker's ACL
        gives one client), or the topic itself (a node's shared response topic)."""
        if topic in self.defaults or not topic.startswith(self.prefix):
            return topic
        return self.prefix + topic[len(self.prefix):].split("/", 1)[0]


def homeassistant_status(prefix: str) -> str:
    """Home Assistant's birth/will topic (``homeassistant/status``)."""
    return f"{prefix}/{HA_STATUS_SUFFIX}"
