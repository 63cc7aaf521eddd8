"""The MQTT front door: topics, the paho adapter, request admission, answers.

``topics`` builds and parses every topic; ``client`` adapts paho-mqtt 2.x (TCP_NODELAY,
persistent session, last will, manual acks, packet-size checks, a watchdog);
``fast_properties`` gives paho's MQTT v5 properties at a fraction of their cost; ``requests``
admits request messages on the network thread (``refusals`` keeps their log lines few);
``dedupe`` remembers answers by request id; ``delivery`` is how the worker
(:mod:`edgevlm.pipeline.worker`) answers an MQTT request; ``replies`` publishes answers and
acks requests once the broker has confirmed them.
"""
