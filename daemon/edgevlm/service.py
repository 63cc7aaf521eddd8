"""``edgevlm serve``: the composition root that wires config, engine, MQTT and the rest.

Start: load the model -> start the worker, ack and health threads -> connect (paho retries with
back-off) -> on the first connect, the ACL probe (:mod:`edgevlm.frontdoors.mqtt.probe`) -> on every
connect, once the subscriptions are confirmed: ``bridge/info``, Home Assistant discovery,
camera states, ``bridge/busy``, ``bridge/health`` and finally ``bridge/state = online``
(:mod:`edgevlm.service_online`). A
refused login, a refused certificate or a denied topic at start-up ends the start
(:class:`StartupFailure`; ``edgevlm serve`` exits with status 78); after that, every failure
is retried. Stop (SIGTERM): stop taking requests (new ones stay unacked, the
broker redelivers them), answer queued ones ``busy``, let the running one finish (then cancel
it), wait for the broker's confirmations, publish ``offline``, disconnect. The board's side of
the shared pool: :mod:`edgevlm.service_pool`.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from . import __version__
from .camera_flow import CameraFlow
from .config import Config
from .engine import Engine
from .frontdoors.mqtt.bridge import Bridge
from .frontdoors.mqtt.client import MqttLink
from .frontdoors.mqtt.connect_errors import EX_CONFIG, ConnectFailure
from .frontdoors.mqtt.dedupe import DedupeMemory
from .frontdoors.mqtt.link_settings import LinkSettings, max_incoming_packet
from .frontdoors.mqtt.messages import Incoming
from .frontdoors.mqtt.pool import PoolMember, pool_settings
from .frontdoors.mqtt.progress import ProgressBeacon
from .frontdoors.mqtt.replies import Ack, Replier
from .frontdoors.mqtt.requests import RequestHandler
from .frontdoors.mqtt.topics import ReplyPolicy, Topics, homeassistant_status
from .liveness import Liveness, LivenessPolicy
from .memory import reuse_image_buffers
from .metrics import Metrics
from .models import demo_model_dir
from .pipeline.admission import RequestSide
from .pipeline.cache import VisionCache
from .pipeline.jobs import JobQueue
from .pipeline.preflight import preflight_context
from .pipeline.worker import Worker
from .service_online import OnlineSequence
from .service_pool import PoolMembership
from .sources.camera_options import OptionStore

log = logging.getLogger(__name__)

TEST_DELAY_ENV = "EDGEVLM_TEST_WORKER_DELAY_MS"  # test-only: the worker sleeps before each job


def sd_notify(message: str) -> bool:
    """Tell systemd (``Type=notify``) about our state; a no-op outside systemd."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
        return True
    except OSError as exc:
        log.debug("sd_notify(%r) failed: %s", message, exc)
        return False


def load_engine(config: Config) -> Engine:
    """The configured model (the bundled demo model when ``model.path`` is absent)."""
    path = config.model.path or demo_model_dir()
    engine = Engine.load(path, threads=config.model.threads, context=config.model.context,
                         max_pixels=config.model.max_pixels, min_pixels=config.model.min_pixels,
                         family=config.model.family, precision=config.model.precision)
    directory = Path(config.cache.dir).expanduser() if config.cache.dir else None
    engine.cache = VisionCache(config.cache.max_bytes, directory, engine.facts.fingerprint)
    log.info("loaded %s in %.0f ms (precision %s)", engine.name, engine.load_ms,
             engine.precision)
    return engine


class StartupFailure(Exception):
    """The broker refused us at start-up in a way retrying cannot fix (login, TLS, ACL)."""

    exit_code = EX_CONFIG


def broker_host(config: Config) -> str:
    if config.mqtt.host:
        return config.mqtt.host
    if config.zeroconf.enabled and config.zeroconf.browse_broker:
        from .integrations.announce import browse_mqtt_broker

        found = browse_mqtt_broker()
        if found is not None:
            log.info("no mqtt.host configured; using the broker found by zeroconf: %s:%d",
                     *found)
            return found[0]
    return "localhost"


class Service:
    """The daemon: one engine, one MQTT connection, start()/stop()."""

    def __init__(self, config: Config, engine: Engine | None = None, *,
                 exit_process: Any = os._exit, liveness: LivenessPolicy | None = None) -> None:
        self.config = config
        mqtt = config.mqtt
        self.node_id = mqtt.resolved_node_id()
        self.topics = Topics(mqtt.base_topic, self.node_id)
        self.engine = engine if engine is not None else load_engine(config)
        self.metrics = Metrics()
        self.host = broker_host(config)
        settings = LinkSettings.from_config(
            mqtt, self.host, self.topics.state,
            max_packet_size=max_incoming_packet(config.limits.max_payload_bytes))
        self.link = MqttLink(settings, on_message=self._on_message, on_ready=self._on_ready,
                             on_connection=self._on_connection, exit_process=exit_process,
                             on_failure=self._on_link_failure)
        self.replier = Replier(self.link, metrics=self.metrics)
        context = preflight_context(self.engine, mm=config.limits.limit_mm_per_prompt,
                                    media=config.media.policy())
        self.queue = JobQueue(config.limits.max_queue)
        self.metrics.watch_queue(self.queue.__len__)
        self.dedupe = DedupeMemory(config.limits.dedupe_window_s,
                                   config.limits.dedupe_max_entries)
        self.requests = RequestHandler(self.topics, RequestSide(
            config.limits.request_limits(), context), self.queue, self.dedupe, self.replier,
            self.metrics, config.limits.default_deadline_ms)
        self.bridge = Bridge(self.topics, self.replier, self.metrics, self.engine,
                             mqtt.health_interval_s)
        self.worker = Worker(self.engine, context, self.queue, self.metrics,
                             on_answer=self.bridge.publish_answer,
                             on_busy=self.bridge.publish_busy,
                             share_request_answers=mqtt.share_request_answers,
                             test_delay_s=float(os.environ.get(TEST_DELAY_ENV, "0")) / 1e3)
        # Whether the daemon can serve (edgevlm.liveness): bridge/state, bridge/health and the
        # systemd watchdog follow it; liveness.add_listener(callback) is the hook for more
        # (callback(serving, problem) on the liveness thread at every change).
        self.liveness = Liveness(liveness, job_started=lambda: self.worker.running_since,
                                 failures_in_a_row=self.metrics.failures_in_a_row)
        self.liveness.add_listener(self._on_serving_changed)
        self.http = None  # the HTTP front door (http.enabled; imports aiohttp)
        if config.http.enabled:
            from .frontdoors.http.build import build_http_door

            self.http = build_http_door(config, self.engine, self.queue, self.metrics,
                                        side=lambda: self.requests.side, refs=self.requests.refs,
                                        serving=lambda: self.liveness.serving,
                                        abandon=self.worker.abandon)
        self._stopping = False
        self._online = threading.Event()
        self._settled = threading.Event()  # online, or a start-up failure
        self.shutdown_requested = threading.Event()  # set by signals and start-up failures
        # the shared pool on a connection of its own, a member only while serving
        # (edgevlm.frontdoors.mqtt.pool, edgevlm.service_pool); requests that ask for it hear
        # `working` (edgevlm.frontdoors.mqtt.progress)
        self.pool: PoolMember | None = None
        self.pool_membership = PoolMembership(
            mqtt.shared_group, self.topics, self.link, self.replier, self.worker, self.bridge,
            self.liveness, stopping=lambda: self._stopping, online=self._online)
        if mqtt.shared_group:
            membership = self.pool_membership
            self.pool = PoolMember(
                pool_settings(settings, self.topics, mqtt.shared_group, mqtt.pool_keepalive_s),
                self.topics, mqtt.shared_group, on_message=self._on_message,
                unfit=membership.unfit, on_left=membership.left, exit_process=exit_process,
                publish_state=lambda payload: membership.publish_state(payload),
                probe=membership.probe_node_link)
        self.progress = ProgressBeacon(self.node_id, self._publish_progress,
                                       serving=lambda: self.liveness.serving)
        self.requests.progress = self.progress
        self.bridge.health_extra = self._health_extra
        self.camera_options = OptionStore(config.cache.dir)  # edgevlm.sources.camera_options
        self.cameras = CameraFlow(config, self.node_id, self.queue, self.metrics,
                                  side=lambda: self.requests.side,
                                  publish=self._publish_camera, model_name=self.engine.name,
                                  options=self.camera_options)
        self.sources = self.cameras.sources
        self.ha_status = homeassistant_status(config.homeassistant.prefix)
        filters = self.topics.request_subscriptions(None)
        if mqtt.shared_group:  # an earlier version's persistent session may hold it
            self.link.set_stale_subscriptions(
                self.topics.request_subscriptions(mqtt.shared_group)[len(filters):])
        filters += self.sources.subscriptions()
        if config.homeassistant.discovery:
            filters.append(self.ha_status)
        self.link.set_subscriptions(filters)
        # replies only under mqtt.reply_prefix, never where the daemon publishes or listens
        self.requests.replies = ReplyPolicy.for_node(
            self.topics, mqtt.reply_prefix, [*filters, f"{config.homeassistant.prefix}/#"])
        # on every connect: the ACL probe (the first time), our state, then online
        self.online_sequence = OnlineSequence(
            config, self.engine, self.topics, self.link, self.replier, self.bridge,
            self.metrics, self.liveness, sources=self.sources,
            camera_options=self.camera_options, pool=self.pool,
            publish_pool_off=self.pool_membership.publish_off, online=self._online,
            settled=self._settled, shutdown_requested=self.shutdown_requested)
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._started = False
        self._announcer: Any = None

    @property
    def online(self) -> threading.Event:
        """Set once ``bridge/state = online`` was confirmed by the broker."""
        return self._online

    @property
    def startup_failure(self) -> str | None:
        """Why the start failed (the broker refused us), else None."""
        return self.online_sequence.startup_failure

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float | None = 60.0) -> None:
        """Start serving; wait up to ``timeout`` s until online (None: do not wait)."""
        # The model, config and modules live as long as the process: out of the cyclic GC's
        # full collections, which otherwise scanned them every ~1,000 requests (a ~50 ms pause
        # of the network thread in a flood).
        gc.collect()
        gc.freeze()
        self.replier.start()
        self.worker.start()
        if self.http is not None:
            self.http.start()  # OSError (the port is taken): the start fails
        self.bridge.start()
        self.liveness.start()
        self.progress.start()
        self.link.start()
        if self.pool is not None:
            self.pool.start()
        self._started = True
        self._start_announcer()
        if timeout is not None and self._settled.wait(timeout) and self.startup_failure:
            self.stop("cannot start")
            raise StartupFailure(self.startup_failure)
        if timeout is not None and not self._online.is_set():
            self.stop("not online in time")
            raise TimeoutError(f"not online within {timeout:.0f} s (broker "
                               f"{self.host}:{self.config.mqtt.port} unreachable?)")

    def _start_announcer(self) -> None:
        if not self.config.zeroconf.enabled:
            return
        try:
            from .integrations.announce import Announcer

            http = (None if self.http is None or self.http.port is None
                    else (self.http.port, self.config.http.api_key is not None))
            self._announcer = Announcer(self.node_id, __version__, self.topics.base,
                                        self.engine.name, self.host, self.config.mqtt.port,
                                        http=http)
            self._announcer.start()
        except Exception:
            log.exception("zeroconf announcement failed (serving carries on)")

    def stop(self, reason: str = "stopped", grace_s: float = 10.0) -> None:
        """Graceful stop; idempotent."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            log.info("stopping (%s)", reason)
            self._stopping = True
            if self.pool is not None:  # first: no pooled request arrives to be refused
                self.pool.stop()
            self.requests.accepting = False
            if self.http is not None:
                self.http.stop()
            self.liveness.stop()
            if self._started:
                self.worker.shutdown(grace_s)
                self.replier.stop(drain_s=5.0)
                self.bridge.stop()
                self.progress.stop()
                self.online_sequence.publish_offline()
                self.link.stop()
            self.cameras.stop()
            if self._announcer is not None:
                self._announcer.stop()
            self._online.clear()
            self._stopped.set()

    def wait(self) -> None:
        """Block until stopped."""
        self._stopped.wait()

    def healthy(self) -> bool:
        """For the systemd watchdog: the worker and the network thread are alive, and the
        daemon can serve (:mod:`edgevlm.liveness`)."""
        return (self.worker.alive and self.link.network_thread_alive()
                and self.liveness.serving)

    # ------------------------------------------------------------------ liveness

    def _on_serving_changed(self, serving: bool, problem: str | None) -> None:
        """Liveness thread: say it on bridge/state and bridge/health, and to systemd; join
        or leave the shared pool."""
        if self.pool is not None:
            self.pool.poke()
        sd_notify(f"STATUS=serving {self.engine.name} as {self.node_id}" if serving
                  else f"STATUS=cannot serve: {problem}")
        if not (self.online_sequence.probe_passed and self.link.ready):
            return  # the next connect publishes the state
        try:
            self.online_sequence.publish_state()
            self.bridge.publish_health()
        except Exception:
            log.exception("publishing the serving state failed")

    def _health_extra(self, health: dict[str, Any]) -> None:
        health["serving"] = self.liveness.serving
        health["problem"] = self.liveness.problem
        health["mqtt"]["unreadable_dropped"] = self.link.unreadable
        health["pool"] = self.pool.status() if self.pool is not None else None

    def _publish_progress(self, topic: str, payload: bytes, properties: Any) -> None:
        self.link.publish(topic, payload, qos=0, properties=properties)

    # ------------------------------------------------------------------ MQTT callbacks

    def _on_connection(self, connected: bool) -> None:
        if self.pool is not None:
            self.pool.poke()
        self.liveness.connection(connected)
        self.metrics.set_connected(connected)
        if connected and self.link.connects > 1:
            self.metrics.reconnected()

    def _on_link_failure(self, failure: ConnectFailure) -> None:
        """A failed connection (network thread): permanent ones end a start, never a run."""
        if failure.permanent and not self.online_sequence.probe_passed:
            self.online_sequence.fail_startup(failure.message)

    def _on_ready(self, session_present: bool) -> None:
        """Subscriptions confirmed (network thread): :mod:`edgevlm.service_online`."""
        self.online_sequence.on_ready(session_present)

    def _on_message(self, msg: Incoming) -> None:
        """Network thread: route one message; never raises (the link guards it too)."""
        request_topic = self.topics.parse_request(msg.topic)
        if request_topic is not None:
            self.requests.handle(msg, request_topic)
            return
        ack = [Ack.of(msg)]
        if msg.topic == self.ha_status:
            if msg.payload.strip().lower() == b"online":
                delay = random.uniform(1.0, 5.0)
                timer = threading.Timer(delay, self.online_sequence.republish_discovery)
                timer.daemon = True
                timer.start()
            self.replier.ack_now(ack)
            return
        out = self.sources.handle(msg.topic, msg.payload, msg.retain)
        for topic, payload, retain in out or []:
            self.replier.publish(topic, payload, retain=retain)
        self.replier.ack_now(ack)

    def _publish_camera(self, topic: str, payload: bytes, retain: bool) -> None:
        self.replier.publish(topic, payload, retain=retain)


def serve_main(config: Config) -> int:
    """Run the daemon until SIGTERM/SIGINT; systemd notifications when under systemd."""
    reuse_image_buffers()
    try:
        service = Service(config)
    except Exception as exc:
        cause = str(exc).strip() or f"{type(exc).__name__} (no message)"  # never "cannot start: "
        log.error("cannot start: %s", cause, exc_info=log.isEnabledFor(logging.DEBUG))
        return 1
    stop = service.shutdown_requested

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        service.start(timeout=None)
        sd_notify(f"READY=1\nSTATUS=serving {service.engine.name} as {service.node_id}")
        usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        interval = usec / 2e6 if usec > 0 else 5.0
        while not stop.wait(interval):
            if usec > 0 and service.healthy():
                sd_notify("WATCHDOG=1")
        sd_notify("STOPPING=1")
        if service.startup_failure is not None:
            service.stop("cannot start")
            log.error("exiting with status %d: the MQTT broker refused the daemon (the "
                      "reason is logged above); fix it and start again", EX_CONFIG)
            return EX_CONFIG
        service.stop("signal")
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
