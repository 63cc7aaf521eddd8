#!/usr/bin/env python3
"""Write the sample frames ``edgevlm demo`` sends: ``daemon/edgevlm/models/samples/``.

Held-out scenes of the demo model (``scenes.make_item(TEST_SEED, 20000 + i, task)``; never
used in training), saved as JPEG (quality 95) or PNG, with ``samples.json`` listing each
frame's prompt and the truth of the scene. Run after changing ``scenes.py``:
``python tools/demo_model/make_samples.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.demo_model.scenes import TEST_SEED, make_item  # noqa: E402

OUT = REPO / "daemon" / "edgevlm" / "models" / "samples"
FIRST_INDEX = 20_000
# (name, file, task, via): 'camera' frames go to a camera topic instead of a describe request
SAMPLES = (
    ("front door", "front_door.jpg", "caption", "request"),
    ("driveway", "driveway.jpg", "caption", "request"),
    ("garden", "garden.jpg", "count", "request"),
    ("porch", "porch.jpg", "exists", "request"),
    ("garage", "garage.jpg", "what_at", "request"),
    ("back door", "back_door.png", "caption", "camera"),
)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    listed = []
    for i, (name, file, task, via) in enumerate(SAMPLES):
        item = make_item(TEST_SEED, FIRST_INDEX + i, task=task)
        path = OUT / file
        if path.suffix == ".png":
            item.images[0].save(path, optimize=True)
        else:
            item.images[0].save(path, quality=95)
        entry = {"name": name, "image": file, "prompt": item.prompt, "truth": item.answer}
        if via == "camera":
            entry["via"] = "camera"
        listed.append(entry)
    about = ("Held-out scenes of the demo model (tools/demo_model/scenes.py, "
             f"make_item(TEST_SEED={TEST_SEED}, {FIRST_INDEX} + i)); 'truth' is what the scene "
             "shows, not what the model says. 'via': 'camera' frames go to a camera topic "
             "instead of a describe request. Written by tools/demo_model/make_samples.py.")
    (OUT / "samples.json").write_text(json.dumps({"about": about, "samples": listed},
                                                 indent=1) + "\n")
    print(f"wrote {len(listed)} samples to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
