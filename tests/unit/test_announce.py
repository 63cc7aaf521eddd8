"""Zeroconf: the announcement is found by a browser on this machine, carries the TXT record,
goes away on stop; an ``_mqtt._tcp`` broker is found; failures never reach the daemon.

These tests use real multicast DNS on the machine's interfaces (two Zeroconf instances in
one process talk through the network stack, not through a shared cache). Where multicast
does not work they fail, they are not skipped.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest
from zeroconf import ServiceInfo, Zeroconf

from edgevlm.integrations import announce
from edgevlm.integrations.announce import (
    IP_VERSION,
    MQTT_SERVICE_TYPE,
    SERVICE_TYPE,
    Announcer,
    browse,
    browse_mqtt_broker,
    free_instance_name,
    instance_name,
    local_addresses,
    service_info,
)

WAIT_S = 20.0


def unique_node() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def txt(info: ServiceInfo) -> dict[str, str]:
    return {k.decode(): (v or b"").decode() for k, v in info.properties.items()}


def find(node: str, timeout: float = WAIT_S) -> ServiceInfo | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for info in browse(SERVICE_TYPE, 3.0):
            if txt(info).get("id") == node:
                return info
    return None


def test_service_info_txt_addresses_and_loopback_broker() -> None:
    info = service_info("garage", "0.1.0", "edgevlm", "Qwen3-VL-2B", "localhost", 1883,
                        addresses=["192.168.1.5", "10.0.0.7", "fd00::5"])
    assert info.type == SERVICE_TYPE == "_edgevlm._tcp.local."
    assert len(SERVICE_TYPE.split(".")[0].lstrip("_").encode()) <= 15  # DNS-SD limit
    assert info.name == "edgevlm garage._edgevlm._tcp.local." and info.port == 1883
    assert txt(info) == {"id": "garage", "ver": "0.1.0", "api": "1", "base": "edgevlm",
                         "model": "Qwen3-VL-2B", "mqtt": "192.168.1.5:1883"}
    assert info.parsed_addresses() == ["192.168.1.5", "10.0.0.7", "fd00::5"]
    remote = service_info("garage", "0.1.0", "edgevlm", "m", "broker.lan", 8883, ["10.0.0.7"])
    assert txt(remote)["mqtt"] == "broker.lan:8883"
    with_http = service_info("garage", "0.1.0", "edgevlm", "m", "broker.lan", 8883,
                             ["10.0.0.7"], http=(11434, True))
    assert (txt(with_http)["http"], txt(with_http)["http_key"]) == ("11434", "1")
    assert "http" not in txt(remote)


def test_free_instance_name_appends_the_first_free_number() -> None:
    def full(label: str) -> str:
        return f"{label}.{SERVICE_TYPE}"

    assert free_instance_name("garage", set()) == "edgevlm garage"
    assert free_instance_name("garage", {full("edgevlm porch")}) == "edgevlm garage"
    assert free_instance_name("garage", {full("EDGEVLM Garage")}) == "edgevlm garage (2)"
    taken = {full("edgevlm garage"), full("edgevlm garage (2)")}
    assert free_instance_name("garage", taken) == "edgevlm garage (3)"
    long_node = "n" * 80
    assert len(instance_name(long_node).encode()) == 63
    renamed = free_instance_name(long_node, {full(instance_name(long_node))})
    assert renamed.endswith(" (2)") and len(renamed.encode()) == 63
    wide = free_instance_name("é" * 40, {full(instance_name("é" * 40))})  # 2 bytes each
    assert wide.endswith(" (2)") and len(wide.encode()) <= 63


def test_local_addresses_exclude_loopback_and_put_the_primary_first() -> None:
    addresses = local_addresses()
    assert addresses, "this machine has no non-loopback address"
    assert not any(a.startswith("127.") or a == "::1" for a in addresses)
    primary = announce.primary_address()
    if primary is not None:
        assert addresses[0] == primary


def test_announcement_is_browsed_back_and_removed_on_stop() -> None:
    node = unique_node()
    announcer = Announcer(node, "0.1.0", "edgevlm", "qwen3vl-demo", "localhost", 1883)
    announcer.start()
    try:
        assert announcer.registered.wait(WAIT_S), "registration did not finish"
        info = find(node)
        assert info is not None, "the announcement was not found by browsing"
        assert txt(info)["base"] == "edgevlm" and txt(info)["api"] == "1"
        assert info.port == 1883
        assert set(info.parsed_addresses()) >= set(local_addresses()[:1])
    finally:
        announcer.stop()
    assert not announcer.registered.is_set()
    assert find(node, timeout=3.0) is None, "still announced after stop()"


def test_two_daemons_with_the_same_node_get_distinct_names() -> None:
    """On one host, too: the second daemon must hear the first one's defence (RFC 6762 s. 9)."""
    node = unique_node()
    first = Announcer(node, "0.1.0", "edgevlm", "m", "localhost", 1883)
    second = Announcer(node, "0.1.0", "edgevlm", "m", "localhost", 1884)
    first.start()
    assert first.registered.wait(WAIT_S)
    second.start()
    try:
        assert second.registered.wait(WAIT_S)
        assert first.info is not None and second.info is not None
        assert first.info.name != second.info.name
        assert first.info.name == f"edgevlm {node}.{SERVICE_TYPE}"
        assert second.info.name == f"edgevlm {node} (2).{SERVICE_TYPE}"
    finally:
        second.stop()
        first.stop()


@pytest.fixture
def fake_broker_service() -> Iterator[int]:
    """An ``_mqtt._tcp`` service registered by another Zeroconf instance."""
    port = 20000 + uuid.uuid4().int % 20000
    zc = Zeroconf(ip_version=IP_VERSION)
    info = ServiceInfo(MQTT_SERVICE_TYPE, f"broker {unique_node()}.{MQTT_SERVICE_TYPE}",
                       port=port, server="edgevlm-test-broker.local.",
                       parsed_addresses=local_addresses()[:1])
    zc.register_service(info)
    try:
        yield port
    finally:
        zc.unregister_service(info)
        zc.close()


def test_browse_mqtt_broker_finds_one(fake_broker_service: int) -> None:
    found = None
    deadline = time.monotonic() + WAIT_S
    while found is None and time.monotonic() < deadline:
        found = browse_mqtt_broker(timeout_s=3.0)
    assert found is not None
    host, port = found
    assert host in local_addresses() and port > 0


def test_failures_are_logged_never_raised(monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: object, **kwargs: object) -> Zeroconf:
        raise OSError("no multicast here")

    monkeypatch.setattr(announce, "Zeroconf", broken)
    caplog.set_level(logging.WARNING, logger="edgevlm.integrations.announce")
    announcer = Announcer("n", "0.1.0", "edgevlm", "m", "localhost", 1883)
    announcer.start()
    announcer.stop()
    assert not announcer.registered.is_set()
    assert browse_mqtt_broker(timeout_s=0.1) is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("announcement failed" in m for m in messages), messages
    assert any("browsing for an MQTT broker failed" in m for m in messages), messages
