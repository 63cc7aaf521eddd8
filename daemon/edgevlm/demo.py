"""``edgevlm demo``: the daemon end to end on a fresh machine, with nothing to configure.

1. A broker: the configured one when it answers, else a private one on a free loopback port —
   a ``mosquitto`` child process with a throw-away config when the binary exists, else the
   embedded Python broker (:mod:`edgevlm.frontdoors.mqtt.embedded_broker`).
2. The daemon (:class:`edgevlm.service.Service`) in this process with the bundled demo model,
   Home Assistant discovery and zeroconf off.
3. Sample frames (``models/samples``) sent through MQTT exactly as a user would: describe
   requests (MQTT v5, Response Topic + Correlation Data) and one frame on a camera topic.
4. Each answer printed with its metrics (``--json``: one JSON object per line), then
   everything is shut down and the last line says how many answers match the scene
   (``N/6 answers match the scene``; ``--json``: a summary object). An answer matches when
   its text equals the sample's ``truth`` (:func:`matches`). Exit code 0 only when every
   sample got an answer: a wrong answer is the model's, not a failure of the run.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import paho.mqtt.client as paho

from .ask import BrokerUnavailable, DescribeClient, NoAnswer, describe_request, image_part
from .config import Config, ConfigError, default_config, load_config
from .frontdoors.mqtt.topics import Topics
from .models import demo_model_dir

log = logging.getLogger(__name__)

SAMPLES_DIR = Path(__file__).resolve().parent / "models" / "samples"
NODE_ID = "demo"
BrokerKind = Literal["auto", "mosquitto", "embedded"]


@dataclass(frozen=True)
class Sample:
    name: str
    image: Path
    prompt: str
    truth: str
    via: Literal["request", "camera"] = "request"

    @property
    def camera(self) -> str:
        return self.name.replace(" ", "_")


def matches(text: object, truth: str) -> bool:
    """Whether an answer says exactly what the scene shows: equal after trimming the ends,
    collapsing runs of whitespace and ignoring case."""
    if not isinstance(text, str):
        return False
    return " ".join(text.split()).casefold() == " ".join(truth.split()).casefold()


def load_samples(directory: Path = SAMPLES_DIR) -> list[Sample]:
    doc = json.loads((directory / "samples.json").read_text(encoding="utf-8"))
    return [Sample(s["name"], directory / s["image"], s["prompt"], s["truth"],
                   s.get("via", "request")) for s in doc["samples"]]


# --------------------------------------------------------------------------- brokers


def mosquitto_binary() -> str | None:
    found = shutil.which("mosquitto")
    if found:
        return found
    for candidate in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto"):
        if Path(candidate).exists():
            return candidate
    return None


def reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mosquitto_broker(binary: str, timeout: float = 10.0, nodelay: bool = True,
                     log_all: bool = False) -> Iterator[int]:
    """A private mosquitto on 127.0.0.1 (free port, temp config, no persistence; Nagle's
    algorithm off unless ``nodelay`` is false)."""
    with private_mosquitto(binary, timeout, nodelay, log_all) as (port, _log):
        yield port


@contextlib.contextmanager
def private_mosquitto(binary: str, timeout: float = 10.0, nodelay: bool = True,
                      log_all: bool = False) -> Iterator[tuple[int, Path]]:
    """:func:`mosquitto_broker` that also yields its log file (``log_all``: every log type,
    e.g. when a client's keepalive ran out)."""
    with tempfile.TemporaryDirectory(prefix="edgevlm-mosquitto-") as tmp:
        port = _free_port()
        log_file = Path(tmp) / "mosquitto.log"
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"user {getpass.getuser()}\n"  # as root it would switch to "mosquitto"
                        f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                        f"persistence false\nset_tcp_nodelay {str(nodelay).lower()}\n"
                        f"log_dest file {log_file}\n" + ("log_type all\n" if log_all else ""))
        proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + timeout
            while not reachable("127.0.0.1", port, 0.5):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise OSError(f"mosquitto did not start on port {port}")
                time.sleep(0.05)
            yield port, log_file
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextlib.contextmanager
def embedded_broker() -> Iterator[int]:
    from .frontdoors.mqtt.embedded_broker import EmbeddedBroker

    broker = EmbeddedBroker("127.0.0.1", 0)
    try:
        yield broker.start()
    finally:
        broker.stop()


@contextlib.contextmanager
def private_broker(kind: BrokerKind) -> Iterator[tuple[str, int]]:
    """(description, port) of a private broker of ``kind`` ("auto": mosquitto if present)."""
    binary = mosquitto_binary() if kind != "embedded" else None
    if kind == "mosquitto" and binary is None:
        raise OSError("--broker-kind mosquitto: no mosquitto binary on this machine")
    with contextlib.ExitStack() as stack:
        port: int | None = None
        if binary is not None:
            try:
                port = stack.enter_context(mosquitto_broker(binary))
                what = f"private mosquitto ({binary})"
            except OSError as exc:
                if kind == "mosquitto":
                    raise
                log.warning("%s; using the embedded broker", exc)
        if port is None:
            port = stack.enter_context(embedded_broker())
            what = "private embedded broker (pure Python)"
        yield what, port


# --------------------------------------------------------------------------- the run


class Printer:
    def __init__(self, json_output: bool, out: Callable[[str], None]) -> None:
        self.json, self.out = json_output, out
        self.tally: tuple[int, int, int] | None = None  # answered, matched, samples

    def note(self, text: str) -> None:
        if not self.json:
            self.out(text)

    def result(self, index: int, total: int, sample: Sample, record: dict[str, Any]) -> None:
        if self.json:
            self.out(json.dumps(record, ensure_ascii=False))
            return
        where = "camera topic" if sample.via == "camera" else "describe request"
        self.out(f"[{index}/{total}] {sample.name} ({sample.image.name}, {where}): "
                 f"{sample.prompt}")
        if record["status"] == "ok":
            m = record["metrics"]
            self.out(f"      -> {record['text']}")
            self.out(f"         {record['model']} · total {m.get('total_ms', 0):.0f} ms · "
                     f"ttft {m.get('ttft_ms', 0):.0f} ms · encode {m.get('encode_ms', 0):.0f}"
                     f" ms · round trip {record['round_trip_ms']:.0f} ms")
        else:
            self.out(f"      x  {record['error']}")
        self.out(f"         (the scene shows: {sample.truth})")

    def summary(self) -> None:
        """The last line of a run that got as far as asking (``tally``), once."""
        if self.tally is None:
            return
        (answered, matched, total), self.tally = self.tally, None
        if self.json:
            self.out(json.dumps({"summary": True, "samples": total, "answered": answered,
                                 "match": matched}))
            return
        self.out(f"edgevlm demo: {answered}/{total} samples answered")
        self.out(f"{matched}/{total} answers match the scene")


def _stdout_line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _record(sample: Sample, status: str, **fields: Any) -> dict[str, Any]:
    return {"sample": sample.name, "image": sample.image.name, "via": sample.via,
            "prompt": sample.prompt, "status": status, **fields, "truth": sample.truth,
            "match": status == "ok" and matches(fields.get("text"), sample.truth)}


def _ask_sample(client: DescribeClient, sample: Sample, timeout: float) -> dict[str, Any]:
    start = time.perf_counter()
    request = describe_request(sample.prompt, [image_part(sample.image.read_bytes())],
                               max_tokens=64, temperature=0.0)
    try:
        answer = client.ask(request, NODE_ID, timeout)
    except NoAnswer as exc:
        return _record(sample, "timeout", error=str(exc))
    round_trip = (time.perf_counter() - start) * 1e3
    if answer.get("status") != "ok":
        err = answer.get("error") or {}
        return _record(sample, "error", error=f"{err.get('type')}: {err.get('message')}",
                       round_trip_ms=round(round_trip, 1))
    data = answer["data"]
    return _record(sample, "ok", text=data["text"], model=data["model"],
                   metrics=data["metrics"], usage=data.get("usage"),
                   round_trip_ms=round(round_trip, 1))


def _camera_sample(client: DescribeClient, config: Config, sample: Sample, timeout: float
                   ) -> dict[str, Any]:
    topics = Topics(config.mqtt.base_topic, NODE_ID)
    got: list[dict[str, Any]] = []
    arrived = threading.Event()

    def on_description(msg: paho.MQTTMessage) -> None:
        with contextlib.suppress(ValueError):
            body = json.loads(msg.payload)
            if not msg.retain and isinstance(body, dict):  # not an old one kept by the broker
                got.append(body)
                arrived.set()

    client.watch(topics.camera(sample.camera, "description"), on_description, timeout)
    start = time.perf_counter()
    client.publish(topics.camera(sample.camera, "image"), sample.image.read_bytes())
    if not arrived.wait(timeout):
        return _record(sample, "timeout", error=f"no description within {timeout:g} s")
    body = got[0]
    return _record(sample, "ok", text=body.get("text"), model=body.get("model"),
                   metrics=body.get("metrics") or {},
                   round_trip_ms=round((time.perf_counter() - start) * 1e3, 1))


def demo_config(host: str, port: int, threads: int, base: Config | None) -> Config:
    overrides: dict[str, Any] = {
        "mqtt.host": host, "mqtt.port": port, "mqtt.node_id": NODE_ID,
        "mqtt.client_id": f"edgevlm-demo-{port}", "mqtt.clean_start": True,
        "mqtt.session_expiry_s": 0, "homeassistant.discovery": False,
        "zeroconf.enabled": False, "model.path": None, "model.threads": threads,
        "model.context": 2048,
    }
    for sample in load_samples():
        if sample.via == "camera":
            overrides[f"cameras.{sample.camera}.prompt"] = sample.prompt
    if base is None:
        return default_config(env=None, overrides=overrides)
    data = base.model_dump(mode="python")
    mqtt = {f"mqtt.{k}": data["mqtt"][k] for k in ("username", "password", "tls", "base_topic")}
    return default_config(env=None, overrides={**mqtt, **overrides})


def run_demo(json_output: bool = False, out: Callable[[str], None] | None = None, *,
             broker: tuple[str, int] | None = None, config_file: str | None = None,
             broker_kind: BrokerKind = "auto", threads: int = 2, timeout: float = 60.0) -> int:
    printer = Printer(json_output, out or _stdout_line)
    base: Config | None = None
    if config_file is not None:
        try:
            base = load_config(config_file)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return 2
        if broker is None and base.mqtt.host:
            broker = (base.mqtt.host, base.mqtt.port)
    try:
        return _run_with_a_broker(printer, broker, base, broker_kind, threads, timeout)
    finally:
        printer.summary()  # after the daemon and the broker stopped: nothing follows it


def _run_with_a_broker(printer: Printer, broker: tuple[str, int] | None, base: Config | None,
                       broker_kind: BrokerKind, threads: int, timeout: float) -> int:
    with contextlib.ExitStack() as stack:
        if broker is not None and broker_kind == "auto" and reachable(*broker):
            host, port = broker
            printer.note(f"edgevlm demo: using the broker at {host}:{port}")
        else:
            if broker is not None:
                printer.note(f"edgevlm demo: no broker answers at {broker[0]}:{broker[1]}; "
                             "starting a private one")
            try:
                what, port = stack.enter_context(private_broker(broker_kind))
            except OSError as exc:
                print(f"edgevlm demo: {exc}", file=sys.stderr)
                return 3
            host = "127.0.0.1"
            printer.note(f"edgevlm demo: {what} on {host}:{port}, stopped on exit")
        return _run_against(host, port, demo_config(host, port, threads, base), printer,
                            timeout)


def _run_against(host: str, port: int, config: Config, printer: Printer, timeout: float
                 ) -> int:
    from .service import Service

    samples = load_samples()
    t0 = time.perf_counter()
    printer.note(f"edgevlm demo: loading the bundled model {demo_model_dir().name} ...")
    service = Service(config)
    answered = matched = 0
    online = False
    try:
        service.start()
        online = True
        took_ms = (time.perf_counter() - t0) * 1e3
        printer.note(f"edgevlm demo: daemon online as {config.mqtt.base_topic}/{NODE_ID} "
                     f"after {took_ms:.0f} ms (model loaded, subscriptions confirmed)")
        mqtt = config.mqtt
        with DescribeClient(host, port, base_topic=mqtt.base_topic, username=mqtt.username,
                            password=mqtt.password, tls=mqtt.tls) as client:
            client.connect(timeout)
            for i, sample in enumerate(samples, 1):
                if sample.via == "camera":
                    record = _camera_sample(client, config, sample, timeout)
                else:
                    record = _ask_sample(client, sample, timeout)
                answered += record["status"] == "ok"
                matched += record["match"]
                printer.result(i, len(samples), sample, record)
    except (BrokerUnavailable, TimeoutError) as exc:
        print(f"edgevlm demo: {exc}", file=sys.stderr)
        return 3
    finally:
        service.stop("demo finished")
        if online:
            printer.tally = (answered, matched, len(samples))
    return 0 if answered == len(samples) else 1
