"""How the daemon goes online on every connect (the sequence :mod:`edgevlm.service` starts).

Subscriptions confirmed -> the first time only, the ACL probe
(:mod:`edgevlm.frontdoors.mqtt.probe`; a denied topic ends the start) -> ``bridge/info``,
Home Assistant discovery, camera states, ``bridge/pool`` (pool off), ``bridge/busy``,
``bridge/health`` -> ``bridge/state = online`` (``offline`` while the daemon cannot serve) ->
once the broker confirmed it: online, and the first time, the journaled frigate events'
records (:meth:`edgevlm.sources.cameras.CameraSources.recover`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from . import __version__
from .config import Config
from .engine import Engine
from .frontdoors.mqtt.bridge import Bridge, info_payload
from .frontdoors.mqtt.client import MqttLink
from .frontdoors.mqtt.messages import wait_confirmed
from .frontdoors.mqtt.pool import PoolMember
from .frontdoors.mqtt.probe import AclProbe, probe_targets
from .frontdoors.mqtt.replies import Replier
from .frontdoors.mqtt.topics import Topics
from .liveness import Liveness
from .metrics import Metrics
from .sources.camera_options import OptionStore
from .sources.cameras import CameraSources

log = logging.getLogger(__name__)


class OnlineSequence:
    """The daemon's retained state on the broker, published in order on every connect.

    ``online`` is set once ``bridge/state = online`` was confirmed; ``settled`` once online or
    the start failed (``startup_failure`` says why; ``shutdown_requested`` is set then too).
    """

    def __init__(self, config: Config, engine: Engine, topics: Topics, link: MqttLink,
                 replier: Replier, bridge: Bridge, metrics: Metrics, liveness: Liveness, *,
                 sources: CameraSources, camera_options: OptionStore, pool: PoolMember | None,
                 publish_pool_off: Callable[[], None], online: threading.Event,
                 settled: threading.Event, shutdown_requested: threading.Event) -> None:
        self.config = config
        self.engine = engine
        self.topics = topics
        self.link = link
        self.replier = replier
        self.bridge = bridge
        self.metrics = metrics
        self.liveness = liveness
        self.sources = sources
        self.camera_options = camera_options
        self.pool = pool
        self._publish_pool_off = publish_pool_off
        self.online = online
        self.settled = settled
        self.shutdown_requested = shutdown_requested
        self.probe_passed = False  # the ACL probe passed once: the start is done
        self.startup_failure: str | None = None
        self._state_lock = threading.Lock()  # bridge/state: the last one published is current
        self._recovered = False

    def fail_startup(self, reason: str) -> None:
        if self.startup_failure is None:
            self.startup_failure = reason
        self.shutdown_requested.set()
        self.settled.set()

    def on_ready(self, session_present: bool) -> None:
        """Subscriptions confirmed (network thread): the first time, probe the ACL first."""
        if self.probe_passed:
            self.announce()
            return
        try:
            discovery = None
            if self.config.homeassistant.discovery:
                from .integrations.homeassistant import device_topic, discovery_context

                discovery = device_topic(discovery_context(self.config, __version__,
                                                           self.engine.name))
            targets = probe_targets(self.topics, sorted(self.config.cameras), discovery)
            AclProbe(self.link, targets, self.replier.after_confirmed, self._after_probe).run()
        except Exception:  # a bug in the probe must not keep the daemon offline
            log.exception("the ACL probe failed; going online without it")
            self._after_probe([])

    def _after_probe(self, problems: list[str]) -> None:
        if problems:
            self.fail_startup(f"the broker's ACL denies {len(problems)} topic(s) the daemon "
                              f"needs: {', '.join(problems)} (see the lines above)")
            return
        self.probe_passed = True
        self.announce()

    def announce(self) -> None:
        """Publish our state, then ``online`` (``offline`` while the daemon cannot serve)."""
        steps: tuple[Callable[[], None], ...] = (
            self._publish_info, self.publish_discovery, self._publish_camera_states,
            self._publish_pool_off,
            lambda: self.bridge.publish_busy(self.metrics.busy), self.bridge.publish_health)
        for step in steps:  # none of these may keep us from going online
            try:
                step()
            except Exception:
                log.exception("publishing state on connect failed")
        serving, info = self.publish_state()
        if not serving:
            log.warning("connected, but cannot serve (%s): bridge/state stays offline",
                        self.liveness.problem)
            return
        self.replier.after_confirmed([info], self._went_online)
        log.info("online as %s (requests on %s)", self.topics.node,
                 self.topics.request("describe"))

    def _went_online(self) -> None:
        self.online.set()
        self.settled.set()
        if self.pool is not None:
            self.pool.poke()
        if not self._recovered:  # events journaled by a run that died: their records
            self._recovered = True
            try:
                self.sources.recover()
            except Exception:
                log.exception("recovering the journaled frigate events failed")

    def publish_state(self) -> tuple[bool, Any]:
        """``bridge/state``: ``online`` while serving, else ``offline`` (Home Assistant's
        ``payload_not_available``). Returns (serving, the publish's MQTTMessageInfo)."""
        with self._state_lock:  # the last state published is the current one
            serving = self.liveness.serving
            return serving, self.link.publish(self.topics.state,
                                              b"online" if serving else b"offline",
                                              qos=1, retain=True)

    def publish_offline(self) -> None:
        if not self.link.connected:
            return
        try:
            info = self.link.publish(self.topics.state, b"offline", qos=1, retain=True)
            wait_confirmed(info, 2.0)
        except Exception:
            log.warning("could not publish offline", exc_info=True)

    def _publish_info(self) -> None:
        self.bridge.publish_info(info_payload(self.config, self.engine, self.topics))

    def _publish_camera_states(self) -> None:
        for topic, payload, retain in [*self.sources.state_messages(),
                                       *self.sources.option_messages()]:
            self.replier.publish(topic, payload, retain=retain)

    def publish_discovery(self) -> None:
        if not self.config.homeassistant.discovery:
            return
        import dataclasses

        from .integrations.homeassistant import discovery_context, discovery_messages

        ctx = discovery_context(self.config, __version__, self.engine.name)
        ctx = dataclasses.replace(ctx, removed_cameras=tuple(
            c for c in self.camera_options.discovered_cameras if c not in ctx.cameras))
        for topic, payload in discovery_messages(ctx):
            self.replier.publish(topic, payload, retain=True)
        self.camera_options.set_discovered_cameras(ctx.cameras)

    def republish_discovery(self) -> None:
        """Home Assistant came back online (a timer thread): discovery again."""
        try:
            self.publish_discovery()
        except Exception:
            log.exception("re-publishing discovery failed")
