"""What Frigate really publishes on MQTT, for the Frigate tests.

From blakeblackshear/frigate at e3fa70189 (0.17/0.18 line):

- ``<prefix>/events``: ``{"before", "after", "type"}`` with ``type`` "new"/"update"
  (frigate/track/object_processing.py:133-139) or "end" (:166-173), ``retain=False``.
- ``after`` = ``TrackedObject.to_dict()`` (frigate/track/tracked_object.py:387-437); its
  ``snapshot`` is the object's best thumbnail ``thumbnail_data`` (tracked_object.py:157-170):
  ``frame_time``, ``box``, ``area``, ``region``, ``score``, ``attributes``, ...
- ``<prefix>/<camera>/<label>/snapshot``: the JPEG bytes, ``retain=True``, no id, no time
  (object_processing.py:186-208), only when ``should_mqtt_snapshot`` (:284-297): never for a
  stationary object (``is_stationary``, tracked_object.py:442-444) nor one outside
  ``mqtt.required_zones``.
"""

from __future__ import annotations

import time
from typing import Any


def tracked_object(event_id: str, camera: str = "front_door", label: str = "person", *,
                   start: float | None = None, best: float | None = None,
                   end: float | None = None, sub_label: Any = None,
                   position_changes: int = 3) -> dict[str, Any]:
    """``TrackedObject.to_dict()`` (tracked_object.py:395-430); times default to now."""
    now = time.time()
    start = now - 1.0 if start is None else start
    best = now if best is None else best
    box = [10, 20, 60, 90]
    return {
        "id": event_id, "camera": camera, "frame_time": max(best, end or best),
        "snapshot": {"frame_time": best, "box": box, "area": 3500, "region": [0, 0, 320, 320],
                     "score": 0.88, "attributes": [], "current_estimated_speed": 0,
                     "velocity_angle": 0, "path_data": [], "recognized_license_plate": None,
                     "recognized_license_plate_score": None},
        "snapshot_clean": True, "label": label, "sub_label": sub_label, "top_score": 0.91,
        "false_positive": False, "start_time": start, "end_time": end, "score": 0.88,
        "computed_score": 0.9, "box": box, "area": 3500, "ratio": 0.7,
        "region": [0, 0, 320, 320], "active": position_changes > 0,
        "stationary": position_changes == 0, "motionless_count": 0 if position_changes else 60,
        "position_changes": position_changes, "current_zones": [],
        "entered_zones": ["porch"], "has_clip": False, "has_snapshot": position_changes > 0,
        "attributes": {}, "current_attributes": [], "pending_loitering": False,
        "max_severity": "detection", "current_estimated_speed": 0,
        "average_estimated_speed": 0, "velocity_angle": 0, "path_data": [],
        "recognized_license_plate": None}


def frigate_event(kind: str, event_id: str, camera: str = "front_door", label: str = "person",
                  sub_label: Any = None, **times: Any) -> dict[str, Any]:
    """A message on ``frigate/events`` (object_processing.py:133-139 and :166-173)."""
    after = tracked_object(event_id, camera, label, sub_label=sub_label, **times)
    if kind == "end" and after["end_time"] is None:
        after["end_time"] = time.time()
    before = dict(after, end_time=None)
    return {"type": kind, "before": before, "after": after}
