"""The OpenAI dialect, driven by the ``openai`` package (the client Frigate's ``openai``
provider and LLM Vision's "Custom OpenAI-compatible" provider use)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from edgevlm.config import ConfigError, validate_config
from tests.helpers import data_url, image_bytes, text, user_request
from tests.http_api.conftest import API_KEY
from tests.mqtt.conftest import wait_until

QUESTION = "What is in the picture?"


def client(service: Any, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=service.http_url + "/v1", api_key=key, max_retries=0,
                         timeout=60)


def frigate_openai_body(model: str, prompt: str, images: list[bytes]) -> dict[str, Any]:
    """The request Frigate's openai provider sends for a tracked object: the prompt as a text
    part, then each thumbnail as a JPEG data URL with ``detail: "low"`` (frigate/genai/
    openai.py, ``OpenAIClient._send``, lines 39-86 at commit 01a7ec10)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": prompt}]
    for image in images:
        content.append({"type": "image_url", "image_url": {
            "url": "data:image/jpeg;base64," + base64.b64encode(image).decode(),
            "detail": "low"}})
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def test_a_text_answer_equals_the_mqtt_answer(http_service: Any, mqtt_client: Any) -> None:
    service = http_service()
    answer = client(service).chat.completions.create(
        model="any", messages=[{"role": "user", "content": QUESTION}], max_tokens=8,
        temperature=0, seed=1)
    choice = answer.choices[0]
    assert answer.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage is not None and answer.usage.completion_tokens >= 1
    assert answer.usage.total_tokens == (answer.usage.prompt_tokens
                                         + answer.usage.completion_tokens)
    extension = answer.model_extra["edgevlm"]  # type: ignore[index]
    assert set(extension["metrics"]) >= {"ttft_ms", "tpot_ms", "total_ms", "encode_ms"}

    mqtt = mqtt_client()
    mqtt.sub("edgevlm/clients/http-test/reply")
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    props = Properties(PacketTypes.PUBLISH)
    props.ResponseTopic = "edgevlm/clients/http-test/reply"
    mqtt.pub(f"edgevlm/{service.node_id}/request/describe",
             user_request(text(QUESTION), max_tokens=8, temperature=0, seed=1),
             properties=props)
    (over_mqtt,) = mqtt.inbox.json("edgevlm/clients/http-test/reply")
    assert over_mqtt["data"]["text"] == choice.message.content
    assert over_mqtt["data"]["usage"]["prompt_tokens"] == answer.usage.prompt_tokens


def test_frigates_openai_request_with_two_thumbnails(http_service: Any) -> None:
    service = http_service()
    body = frigate_openai_body("qwen3-vl", "Describe the person.",
                               [image_bytes(96, 64, seed=1), image_bytes(64, 96, seed=2)])
    answer = client(service).chat.completions.create(**body, max_tokens=6)
    assert answer.choices[0].message.content is not None
    extension = answer.model_extra["edgevlm"]  # type: ignore[index]
    assert len(extension["cache"]) == 2 and extension["vision_tokens"] > 0


def test_streaming_gives_the_same_text_and_the_usage(http_service: Any) -> None:
    service = http_service()
    api = client(service)
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url(image_bytes(64, 64))}},
        {"type": "text", "text": QUESTION}]}]
    whole = api.chat.completions.create(model="m", messages=messages, max_tokens=8,
                                        temperature=0)
    pieces, usage, reasons = [], None, []
    for event in api.chat.completions.create(model="m", messages=messages, max_tokens=8,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        if event.usage is not None:
            usage = event.usage
        for choice in event.choices:
            pieces.append(choice.delta.content or "")
            if choice.finish_reason:
                reasons.append(choice.finish_reason)
    assert "".join(pieces) == whole.choices[0].message.content
    assert reasons == [whole.choices[0].finish_reason]
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens


def test_models_lists_the_board_model_with_its_context(http_service: Any) -> None:
    service = http_service({"http.model_name": "qwen3-vl-demo"})
    (model,) = client(service).models.list().data
    assert model.id == "qwen3-vl-demo" and model.owned_by == "edgevlm"
    assert model.model_extra["max_model_len"] == service.engine.context  # type: ignore[index]


def test_an_unsupported_parameter_is_refused_by_name(http_service: Any) -> None:
    service = http_service()
    with pytest.raises(openai.BadRequestError) as info:
        client(service).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    assert info.value.status_code == 400
    assert info.value.body["param"] == "tools"  # type: ignore[index]
    assert "unsupported parameter" in info.value.body["message"]  # type: ignore[index]


def test_the_budget_is_refused_before_the_model_runs(http_service: Any,
                                                     engine_calls: list[Any]) -> None:
    service = http_service({"limits.limit_mm_per_prompt": {"image": 1}})
    api = client(service)
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}],
                                    max_tokens=service.engine.context)
    assert info.value.body["type"] == "context_length_exceeded"  # type: ignore[index]
    two = [{"type": "image_url", "image_url": {"url": data_url(image_bytes(32, 32, seed=s))}}
           for s in (1, 2)]
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model="m", messages=[{"role": "user", "content": two}])
    assert info.value.body["type"] == "mm_limit_exceeded"  # type: ignore[index]
    assert engine_calls == []


def test_a_full_queue_is_429_with_retry_after(http_service: Any, monkeypatch: Any) -> None:
    from edgevlm.service import TEST_DELAY_ENV

    monkeypatch.setenv(TEST_DELAY_ENV, "1500")
    service = http_service({"limits.max_queue": 1})
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2}).encode()

    def post() -> tuple[int, dict[str, str], dict[str, Any]]:
        request = urllib.request.Request(service.http_url + "/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers), json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), json.loads(err.read())

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        first = [pool.submit(post)]  # running (the worker sleeps 1.5 s before it)
        wait_until(lambda: service.worker.running_since is not None)
        first.append(pool.submit(post))  # waiting: the queue holds one
        wait_until(lambda: len(service.queue) == 1)
        status, headers, refused = post()
        assert [f.result()[0] for f in first] == [200, 200]
    assert status == 429 and headers["Retry-After"] == "1"
    assert refused["error"]["type"] == "busy"


def test_an_api_key_guards_every_route_but_health(http_service: Any) -> None:
    service = http_service({"http.api_key": API_KEY})
    with pytest.raises(openai.AuthenticationError):
        client(service, "wrong-key-0123456789").models.list()
    assert client(service, API_KEY).models.list().data
    with urllib.request.urlopen(service.http_url + "/health", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "ok"}


def test_listening_beyond_loopback_needs_a_key() -> None:
    with pytest.raises(ConfigError, match=r"http\.api_key"):
        validate_config({"http": {"enabled": True, "host": "0.0.0.0"}}, "test")
    validate_config({"http": {"enabled": True, "host": "0.0.0.0", "api_key": API_KEY}}, "test")


def test_an_http_image_url_is_refused_and_never_fetched(http_service: Any) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/thumbnail.jpg"  # would hang
    service = http_service()
    try:
        with pytest.raises(openai.BadRequestError) as info:
            client(service).chat.completions.create(model="m", messages=[{
                "role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                            {"type": "text", "text": QUESTION}]}])
        assert "data: URLs" in info.value.body["message"]  # type: ignore[index]
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody came
    finally:
        listener.close()


def test_the_api_key_is_redacted_from_the_config_output() -> None:
    config = validate_config({"http": {"enabled": True, "api_key": API_KEY}}, "test")
    assert config.redacted()["http"]["api_key"] == "***"
    assert API_KEY not in json.dumps(config.redacted())


def test_mqtt_and_http_clients_at_once_each_get_one_answer(http_service: Any,
                                                          mqtt_client: Any) -> None:
    import concurrent.futures

    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    service = http_service({"limits.max_queue": 32})
    reply = "edgevlm/clients/mixed/reply"
    mqtt = mqtt_client()
    mqtt.sub(reply)
    api = client(service)

    def over_http(i: int) -> str:
        answer = api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {i}"}], max_tokens=3)
        return answer.choices[0].message.content or ""

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(over_http, i) for i in range(6)]
        for i in range(6):
            props = Properties(PacketTypes.PUBLISH)
            props.ResponseTopic = reply
            mqtt.pub(f"edgevlm/{service.node_id}/request/describe",
                     user_request(text(f"question {i}"), id=f"mqtt-{i}", max_tokens=3),
                     properties=props)
        texts = [f.result(timeout=120) for f in futures]
    answers = mqtt.inbox.json(reply, count=6, timeout=120)
    assert len(texts) == 6
    assert sorted(a["id"] for a in answers) == [f"mqtt-{i}" for i in range(6)]
    assert all(a["status"] == "ok" for a in answers)
    time.sleep(0.5)  # no second answer arrives late
    assert len(mqtt.inbox.on(reply)) == 6
    requests = service.metrics.snapshot()["requests"]
    assert requests["answered"] == 12 and requests["errored"] == 0


def test_a_flood_through_one_door_does_not_hold_up_the_other(http_service: Any,
                                                             mqtt_client: Any,
                                                             monkeypatch: Any) -> None:
    """The queue is shared fairly (pipeline/jobs.py lanes): an MQTT request sent after eight
    waiting HTTP requests runs after at most one of them, not after all eight."""
    import concurrent.futures

    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from edgevlm.service import TEST_DELAY_ENV

    monkeypatch.setenv(TEST_DELAY_ENV, "300")
    service = http_service({"limits.max_queue": 32})
    reply = "edgevlm/clients/fair/reply"
    mqtt = mqtt_client()
    mqtt.sub(reply)
    api = client(service)
    finished: dict[str, float] = {}

    def over_http(i: int) -> None:
        api.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}],
                                    max_tokens=2)
        finished[f"http-{i}"] = time.monotonic()

    with concurrent.futures.ThreadPoolExecutor(9) as pool:
        futures = [pool.submit(over_http, i) for i in range(9)]  # one runs, eight wait
        wait_until(lambda: service.worker.running_since is not None and len(service.queue) == 8,
                   timeout=60)
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic = reply
        mqtt.pub(f"edgevlm/{service.node_id}/request/describe",
                 user_request(text("the other door"), id="mqtt-0", max_tokens=2),
                 properties=props)
        answer = mqtt.inbox.json(reply, timeout=60)[0]
        finished["mqtt-0"] = time.monotonic()
        for f in futures:
            f.result(timeout=120)
    assert answer["status"] == "ok"
    before = sorted(k for k, t in finished.items() if t < finished["mqtt-0"])
    # the running one and at most the next HTTP request finish first (the MQTT lane waited
    # for one HTTP turn at most); FIFO would have run all nine first
    assert len(before) <= 2, before


def _raw_post(service: Any, body: dict[str, Any]) -> Any:
    """A raw connection that sent a chat completion request (and reads nothing yet)."""
    import socket

    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", service.http.port), timeout=30)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: board\r\n"
                 b"Content-Type: application/json\r\nContent-Length: "
                 + str(len(data)).encode() + b"\r\n\r\n" + data)
    return sock


def test_a_client_gone_before_its_turn_is_never_run(http_service: Any, engine_calls: list[Any],
                                                    monkeypatch: Any) -> None:
    import concurrent.futures

    from edgevlm.service import TEST_DELAY_ENV

    monkeypatch.setenv(TEST_DELAY_ENV, "1500")
    service = http_service()
    api = client(service)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(api.chat.completions.create, model="m", max_tokens=2,
                            messages=[{"role": "user", "content": "first"}])
        wait_until(lambda: service.worker.running_since is not None)  # holds the first
        gone = _raw_post(service, {"model": "m", "max_tokens": 2,
                                   "messages": [{"role": "user", "content": "gone"}]})
        wait_until(lambda: len(service.queue) == 1)  # the second waits its turn
        gone.close()
        first.result(timeout=60)
    time.sleep(2.5)  # the second would have run by now
    assert len(engine_calls) == 1
    assert service.metrics.snapshot()["requests"]["errored"] == 1


def test_a_client_gone_mid_answer_stops_the_generation(http_service: Any, demo_engine: Any,
                                                       monkeypatch: Any) -> None:
    results: list[Any] = []
    original = demo_engine.generate_prepared

    def recording(*args: Any, **kwargs: Any) -> Any:
        results.append(original(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(demo_engine, "generate_prepared", recording)
    # the demo model ends its stories early: without an end token the answer runs to
    # max_tokens unless it is cancelled
    from edgevlm.engine.stopping import StopChecker

    monkeypatch.setattr(demo_engine, "stop_checker",
                        lambda stop: StopChecker(demo_engine.tokenizer, (), stop))
    service = http_service()
    long = service.engine.context - 64
    sock = _raw_post(service, {"model": "m", "max_tokens": long, "stream": True,
                               "temperature": 1.0, "seed": 3,
                               "messages": [{"role": "user", "content": "Tell a story."}]})
    received = b""
    while b"data: " not in received:  # the headers, then the answer has begun
        chunk = sock.recv(4096)
        assert chunk, received
        received += chunk
    sock.close()
    deadline = time.monotonic() + 30
    while not results and time.monotonic() < deadline:
        time.sleep(0.05)
    (result,) = results
    assert result.finish_reason == "cancelled" and len(result.tokens) < long


def _raw_exchange(service: Any, head: bytes) -> bytes:
    """Send a raw request head (no body) and read the server's answer to it."""
    import socket

    with socket.create_connection(("127.0.0.1", service.http.port), timeout=10) as sock:
        sock.sendall(head)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    return received


@pytest.mark.parametrize(("what", "head"), [
    ("a header over 8 KiB",
     b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"),
    ("a request line over 8 KiB",
     b"GET /v1/models?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("65 headers",
     b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
     + b"".join(b"X-H%d: v\r\n" % i for i in range(65)) + b"\r\n"),
])
def test_request_heads_over_their_limits_are_400_and_nothing_else_is_disturbed(
        http_service: Any, engine_calls: list[Any], what: str, head: bytes) -> None:
    """server.py HEADER_LIMITS: refused by the HTTP parser before any route runs."""
    service = http_service()
    answer = _raw_exchange(service, head)
    assert answer.split(b"\r\n", 1)[0].endswith(b" 400 Bad Request"), (what, answer[:200])
    assert engine_calls == []
    within = _raw_exchange(service, b"GET /health HTTP/1.1\r\nHost: x\r\n"
                           + b"".join(b"X-H%d: v\r\n" % i for i in range(40)) + b"\r\n")
    assert within.startswith(b"HTTP/1.1 200"), within[:200]


def test_metrics_parse_as_prometheus_with_vllm_names(http_service: Any) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    service = http_service()
    answer = client(service).chat.completions.create(
        model="m", messages=[{"role": "user", "content": QUESTION}], max_tokens=4)
    with urllib.request.urlopen(service.http_url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    ttft = families["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    count = [s.value for s in ttft.samples if s.name.endswith("_count")]
    assert count == [1.0]
    (generated,) = families["vllm:generation_tokens"].samples
    assert generated.value == answer.usage.completion_tokens  # type: ignore[union-attr]
    assert families["vllm:num_requests_waiting"].samples[0].value == 0


def test_a_video_frames_part_passes_through(http_service: Any) -> None:
    """edgevlm's own part in an OpenAI request: a clip as frames (vision_tokens and image_ref
    parts: tests/http_api/test_parameters.py)."""
    service = http_service()
    frames = [data_url(image_bytes(64, 64, seed=s)) for s in range(4)]
    answer = client(service).chat.completions.create(model="m", max_tokens=4, messages=[{
        "role": "user", "content": [{"type": "video_frames", "video_frames": frames,
                                     "fps": 2.0},
                                    {"type": "text", "text": "What moved?"}]}])
    extension = answer.model_extra["edgevlm"]  # type: ignore[index]
    assert answer.choices[0].message.content is not None and extension["vision_tokens"] > 0


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"{not json", 400, "invalid_request"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "invalid_request"),
    (b"[1, 2]", 400, "invalid_request"),
    (b'{"messages": []}', 400, "invalid_request_error"),
    (b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}', 400,
     "invalid_request_error"),
])
def test_hostile_bodies_get_a_clear_400(http_service: Any, body: bytes, status: int,
                                        kind: str) -> None:
    service = http_service()
    request = urllib.request.Request(service.http_url + "/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == status
    assert json.loads(info.value.read())["error"]["type"] == kind
    assert client(service).models.list().data  # the server carries on


def test_a_body_over_the_payload_limit_is_413_before_it_is_read(http_service: Any) -> None:
    service = http_service({"limits.max_payload_bytes": 100_000})
    request = urllib.request.Request(service.http_url + "/api/generate", b"x" * 200_000,
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 413
    assert "limits.max_payload_bytes" in json.loads(info.value.read())["error"]


def test_https_with_the_configured_certificate(make_service: Any, tmp_path: Any) -> None:
    """http.cert + http.key: the API over TLS, checked against the test CA by the openai
    client (httpx)."""
    import ssl

    import httpx

    from tests.reliability.secure_broker import Pki

    pki = Pki.make(tmp_path / "pki")
    service = make_service({"http.enabled": True, "http.port": 0,
                            "http.cert": str(pki.cert("server")),
                            "http.key": str(pki.key("server"))})
    api = openai.OpenAI(base_url=f"https://127.0.0.1:{service.http.port}/v1", api_key="x",
                        max_retries=0, http_client=httpx.Client(verify=ssl.create_default_context(
                            cafile=str(pki.cert("ca")))))
    assert api.models.list().data
    plain = openai.OpenAI(base_url=f"http://127.0.0.1:{service.http.port}/v1", api_key="x",
                          max_retries=0, timeout=10)
    with pytest.raises(openai.APIConnectionError):
        plain.models.list()  # no plain HTTP on a TLS port
