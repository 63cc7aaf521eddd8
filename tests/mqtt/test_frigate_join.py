"""Issue 21: a Frigate event is described from its own frame or gets a record saying why not.

Payload shapes: :mod:`tests.mqtt.frigate_shapes` (Frigate's source, file and line cited there).
Every test runs the daemon against a real Mosquitto broker.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image

from edgevlm.service import TEST_DELAY_ENV, Service
from edgevlm.sources.cameras import CameraFrame
from tests.helpers import image_bytes
from tests.mqtt.conftest import MqttTestClient, wait_until
from tests.mqtt.frigate_shapes import frigate_event

ROOT = "edgevlm/node1/camera"
CAMERA = {"frigate": True, "frigate_events": ["end"], "max_tokens": 4}


def record_submits(service: Service) -> list[CameraFrame]:
    """Every frame the camera sources hand to the queue (to check which image an event got)."""
    seen: list[CameraFrame] = []
    lock = threading.Lock()
    submit = service.sources._submit

    def spy(frame: CameraFrame) -> None:
        with lock:
            seen.append(frame)
        submit(frame)

    service.sources._submit = spy  # type: ignore[method-assign]
    return seen


def records(watcher: MqttTestClient, count: int) -> dict[str, list[dict[str, Any]]]:
    """The records per event id once ``count`` distinct events have one."""
    def ids() -> dict[str, list[dict[str, Any]]] | None:
        out: dict[str, list[dict[str, Any]]] = {}
        for body in watcher.inbox.json(f"{ROOT}/+/description", count=0):
            out.setdefault(body["id"], []).append(body)
        return out if len(out) >= count else None
    return wait_until(ids, timeout=120, what=f"records of {count} events")  # type: ignore[no-any-return]


def test_an_event_without_its_own_snapshot_is_skipped_not_described_from_an_older_one(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient]
) -> None:
    """Defect 1: person A's snapshot, A's end -> described; person B never moved
    (``position_changes: 0``, so Frigate publishes no snapshot, object_processing.py:284-287)
    -> B is skipped, never described from A's frame."""
    service = make_service(cameras={"front_door": CAMERA})
    seen = record_submits(service)
    frigate, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    shot_a = image_bytes(96, 64, seed=1)
    best_a = time.time()
    frigate.pub("frigate/front_door/person/snapshot", shot_a, retain=True)
    frigate.pub("frigate/events", frigate_event("end", "A", best=best_a))
    (a,) = watcher.inbox.json(f"{ROOT}/front_door/description", where=lambda b: b["id"] == "A")
    assert a["type"] == "description" and a["text"]
    time.sleep(1.0)  # B appears a second later, and stands still
    frigate.pub("frigate/events", frigate_event("end", "B", best=time.time(),
                                                position_changes=0))
    (b,) = watcher.inbox.json(f"{ROOT}/front_door/description", where=lambda b: b["id"] == "B")
    assert (b["status"], b["reason"], b["text"]) == ("skipped", "stale_snapshot", None)
    assert "never moved" in b["detail"]
    assert [f.event_id for f in seen] == ["A"] and seen[0].image == shot_a


def test_a_snapshot_replayed_by_the_broker_after_a_restart_is_never_used(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient]
) -> None:
    """Defect 1: the broker keeps Frigate's retained snapshot (object_processing.py:203-207,
    ``retain=True``) and replays it when the daemon subscribes; its age is unknown."""
    frigate = mqtt_client()
    frigate.pub("frigate/front_door/person/snapshot", image_bytes(96, 64, seed=2), retain=True)
    service = make_service(cameras={"front_door": CAMERA})
    seen = record_submits(service)
    watcher = mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    frigate.pub("frigate/events", frigate_event("end", "C", start=time.time() - 0.5,
                                                best=time.time() - 0.4))
    (c,) = watcher.inbox.json(f"{ROOT}/front_door/description", where=lambda b: b["id"] == "C")
    assert (c["status"], c["reason"]) == ("skipped", "stale_snapshot")
    assert "retained" in c["detail"] and seen == []


def test_three_events_while_busy_each_get_their_own_description(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 2: while the model is busy, end events person, car, person -> three
    descriptions, each from its own snapshot (they used to share one latest-wins slot)."""
    monkeypatch.setenv(TEST_DELAY_ENV, "1500")
    service = make_service(cameras={"front_door": CAMERA})
    seen = record_submits(service)
    frigate, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    shots = {}
    for i, label in enumerate(["person", "car", "person"]):
        best = time.time()
        shots[f"E{i}"] = image_bytes(96, 64, seed=10 + i)
        frigate.pub(f"frigate/front_door/{label}/snapshot", shots[f"E{i}"], retain=True)
        frigate.pub("frigate/events", frigate_event("end", f"E{i}", label=label, best=best))
    got = records(watcher, 3)
    assert sorted(got) == ["E0", "E1", "E2"]
    assert all(len(v) == 1 and v[0]["type"] == "description" for v in got.values()), got
    assert {f.event_id: f.image for f in seen} == shots


def test_a_png_frame_is_published_as_a_jpeg_snapshot(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient]
) -> None:
    """Defect 6: the snapshot image entity says image/jpeg; a PNG frame is re-encoded."""
    make_service(cameras={"yard": {"max_tokens": 4}})
    client = mqtt_client()
    client.sub(f"{ROOT}/yard/snapshot")
    client.pub(f"{ROOT}/yard/image", image_bytes(64, 48, "PNG", seed=3))
    (msg,) = client.inbox.wait(f"{ROOT}/yard/snapshot")
    assert msg.payload.startswith(b"\xff\xd8\xff")
    with Image.open(io.BytesIO(msg.payload)) as img:
        assert (img.format, img.size) == ("JPEG", (64, 48))


def test_a_burst_of_50_events_on_3_cameras_each_get_exactly_one_record(
        make_service: Callable[..., Service], mqtt_client: Callable[..., MqttTestClient],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """50 end events across 3 cameras while the model is busy: every event gets exactly one
    ``description`` or one ``skipped``/``failed`` record, and no description is made from a
    frame older than its event (each described event got the snapshot published for it)."""
    monkeypatch.setenv(TEST_DELAY_ENV, "300")
    cameras = ["cam0", "cam1", "cam2"]
    labels = ["person", "car", "bicycle"]
    service = make_service(cameras={c: CAMERA for c in cameras})
    seen = record_submits(service)
    frigate, watcher = mqtt_client(), mqtt_client()
    watcher.sub(f"{ROOT}/+/description")
    shots: dict[str, bytes] = {}
    join = service.sources._join
    published: dict[tuple[str, str], int] = {}
    for i in range(50):
        camera, label = cameras[i % 3], labels[(i // 3) % 3]
        # The join tells snapshots of one camera and label apart by when they arrive; in
        # Frigate an object's next best frame comes long after the last snapshot arrived, so
        # the burst waits (milliseconds) until the daemon has stamped the earlier ones: a
        # snapshot still in flight when the next event's best frame is taken is the
        # documented residual risk of the rule, not what this test is about.
        key = (camera, label)
        wait_until(lambda key=key: len(join._snapshots.get(key, ())) >= published.get(key, 0),
                   what=f"the earlier {key} snapshots to arrive")
        best = time.time()
        if i % 7 == 3:  # a stationary object: Frigate publishes no snapshot for it
            frigate.pub("frigate/events", frigate_event(
                "end", f"ev{i}", camera, "dog", best=best, position_changes=0))
            continue
        shots[f"ev{i}"] = image_bytes(64, 48, seed=100 + i)
        frigate.pub(f"frigate/{camera}/{label}/snapshot", shots[f"ev{i}"], retain=True)
        published[key] = published.get(key, 0) + 1
        frigate.pub("frigate/events", frigate_event("end", f"ev{i}", camera, label, best=best))
    got = records(watcher, 50)
    time.sleep(1.0)  # a second record would arrive now
    got = records(watcher, 50)
    assert sorted(got) == sorted(f"ev{i}" for i in range(50))
    assert all(len(v) == 1 for v in got.values()), {k: v for k, v in got.items() if len(v) > 1}
    kinds = {k: v[0].get("status") or v[0]["type"] for k, v in got.items()}
    assert set(kinds.values()) <= {"description", "skipped", "failed"}
    assert "description" in kinds.values() and "skipped" in kinds.values()
    for frame in seen:
        assert frame.image == shots[frame.event_id or ""], frame.event_id
    described = {k for k, v in kinds.items() if v == "description"}
    assert described <= {f.event_id for f in seen}
