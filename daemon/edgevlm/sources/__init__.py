"""Camera sources: frames on a camera topic (``cameras``) and Frigate events (``frigate``,
``frigate_api``, ``event_journal``), with the per-camera options Home Assistant sets."""
