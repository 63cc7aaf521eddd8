"""The start-up ACL probe: may the daemon publish where it must, and read what it subscribed?

A broker's ACL that denies the daemon its own topics fails quietly: Mosquitto drops a denied
publish (and, with an ``acl_file``, still grants a denied subscription and then delivers
nothing), so without a check the first sign is a request that never gets its answer. Once per
start, after the broker confirmed the subscriptions and before ``bridge/state = online``, the
probe

- reads the SUBACK: a filter the broker refused (0x80 and up; brokers that check read access
  at subscribe time, e.g. EMQX or Mosquitto's dynamic-security plugin) is a problem;
- publishes one small QoS 1 message (not retained, expiring after 10 s) on a ``acl_probe``
  leaf of every tree the daemon writes — ``bridge/``, ``response/``, each camera's, and
  Home Assistant discovery — and reads the PUBACK: MQTT v5 says "Not authorized" (0x87) for
  a publish the ACL denies (measured with Mosquitto 2.0.11). MQTT 3.1.1 has no such answer:
  on 3.1.1 only the subscriptions are checked, and the log says so.

Every problem is one log line naming the topic, what it is for and the ACL line that allows
it; the service then stops with exit status 78 (see ``Service``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from paho.mqtt.packettypes import PacketTypes

from .client import new_properties
from .topics import Topics

if TYPE_CHECKING:
    import paho.mqtt.client as paho

    from .client import MqttLink

log = logging.getLogger(__name__)

PROBE_LEAF = "acl_probe"
PROBE_PAYLOAD = b'{"probe": "edgevlm start-up ACL check; ignore this message"}'
PROBE_EXPIRY_S = 10

Confirm = Callable[[Sequence["paho.MQTTMessageInfo"], Callable[[], None]], None]


@dataclass(frozen=True)
class ProbeTarget:
    """A topic the probe publishes to, standing for a tree the daemon writes."""

    topic: str       # where the probe message goes
    tree: str        # the filter it stands for, as an ACL line would write it
    purpose: str     # what the daemon publishes there


def probe_targets(topics: Topics, cameras: Sequence[str] = (),
                  discovery_topic: str | None = None) -> list[ProbeTarget]:
    """The trees this daemon publishes to; ``discovery_topic``: one of its Home Assistant
    discovery topics (None: discovery is off)."""
    targets = [
        ProbeTarget(topics.bridge(PROBE_LEAF), topics.bridge("#"),
                    "its state, info and health"),
        ProbeTarget(topics.response(PROBE_LEAF), topics.response("#"),
                    "answers to requests without a v5 Response Topic"),
    ]
    targets += [ProbeTarget(topics.camera(cam, PROBE_LEAF), topics.camera(cam, "#"),
                            f"camera {cam}'s descriptions") for cam in cameras]
    if discovery_topic is not None:
        parent = discovery_topic.rsplit("/", 1)[0]
        targets.append(ProbeTarget(f"{parent}/{PROBE_LEAF}", f"{parent}/#",
                                   "Home Assistant discovery"))
    return targets


class AclProbe:
    """One run of the probe over an MQTT link; ``then(problems)`` gets the denied topics and
    filters (empty: all well), each already logged."""

    def __init__(self, link: MqttLink, targets: Sequence[ProbeTarget], confirm: Confirm,
                 then: Callable[[list[str]], None]) -> None:
        self.link = link
        self.targets = list(targets)
        self._confirm = confirm  # calls back once the broker answered every message
        self._then = then
        self._refused: dict[int, str] = {}
        self._previous: Callable[[int, Any], None] | None = None
        self._who = (f"user '{link.settings.username}'" if link.settings.username is not None
                     else "anonymous clients")

    def run(self) -> None:
        """Start the probe (on the network thread, from ``on_ready``); never blocks."""
        # refused subscriptions: the link has logged them, one line each
        problems = [topic for topic, _ in self.link.refused_subscriptions]
        if not self.link.settings.protocol5:
            log.info("ACL probe: MQTT 3.1.1 gives no error for a denied publish; only the "
                     "subscriptions were checked (mqtt.protocol 5 checks publishing too)")
            self._then(problems)
            return
        self._previous = self.link.on_publish_refused   # the replier's: restored after
        self.link.on_publish_refused = self._on_refused
        props = new_properties(PacketTypes.PUBLISH)
        props.MessageExpiryInterval = PROBE_EXPIRY_S
        sent: dict[int, ProbeTarget] = {}
        infos = []
        for target in self.targets:
            info = self.link.publish(target.topic, PROBE_PAYLOAD, qos=1, properties=props)
            sent[info.mid] = target
            infos.append(info)
        self._confirm(infos, lambda: self._finish(problems, sent))

    def _on_refused(self, mid: int, reason: Any) -> None:
        self._refused[mid] = str(reason)
        if self._previous is not None:  # an answer published meanwhile may be refused too
            self._previous(mid, reason)

    def _finish(self, problems: list[str], sent: dict[int, ProbeTarget]) -> None:
        self.link.on_publish_refused = self._previous
        for mid, target in sent.items():
            reason = self._refused.get(mid)
            if reason is not None:
                problems.append(target.tree)
                log.error("MQTT ACL: the broker does not let %s publish to %s (%s); the daemon "
                          "publishes %s under %s: allow it (`topic write %s` in Mosquitto's "
                          "acl_file)", self._who, target.topic, reason, target.purpose,
                          target.tree, target.tree)
        if not problems:
            log.info("ACL probe: the broker lets the daemon publish to %s",
                     ", ".join(t.tree for t in self.targets))
        self._then(problems)
