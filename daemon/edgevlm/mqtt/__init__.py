"""The MQTT side of the daemon: topics, the paho adapter, request admission, the worker.

``topics`` builds and parses every topic; ``client`` adapts paho-mqtt 2.x (TCP_NODELAY,
persistent session, last will, manual acks, packet-size checks, a watchdog); ``requests``
admits request messages on the network thread; ``dedupe`` remembers answers by request id;
``worker`` owns the engine; ``replies`` publishes answers and acks requests once the broker
has confirmed them.
"""
