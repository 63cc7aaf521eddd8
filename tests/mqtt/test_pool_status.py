"""``edgevlm pool status`` (issue 22): which boards are pool members and serve the pool, read
from the retained bridge topics on a real Mosquitto broker.

The bridge topics are published here by hand, as the daemons publish them (the daemon side has
its own tests): ``bridge/state``, ``bridge/pool``, ``bridge/info`` and ``bridge/health``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edgevlm.cli import main
from edgevlm.pool_status import NodeStatus, node_status, render_table
from tests.mqtt.conftest import Broker, MqttTestClient, free_port

ROOT = Path(__file__).resolve().parents[2]
WAIT = "0.5"  # retained messages follow the SUBACK at once; the default 1.5 s is for networks


def info(node: str, *, group: str | None = "edgevlm", model: str = "qwen3vl-2b",
         version: str = "0.2.0") -> dict[str, Any]:
    return {"version": version, "node_id": node, "model": {"name": model, "family": "qwen3-vl"},
            "capabilities": {"verbs": ["describe"], "pool": group is not None,
                             "pool_group": group}}


def health(serving: bool, problem: str | None = None) -> dict[str, Any]:
    return {"uptime_s": 12.5, "busy": False, "queue_depth": 0, "serving": serving,
            "problem": problem}


def publish_board(client: MqttTestClient, node: str, state: str | None,
                  pool: dict[str, Any] | str | None, info_: dict[str, Any] | str | None,
                  health_: dict[str, Any] | str | None, base: str = "edgevlm") -> None:
    """Retained bridge topics of one board (None: that topic is not published)."""
    for name, payload in (("state", state), ("pool", pool), ("info", info_),
                          ("health", health_)):
        if payload is not None:
            client.pub(f"{base}/{node}/bridge/{name}", payload, retain=True)


def publish_three_boards(client: MqttTestClient, base: str = "edgevlm",
                         with_member: bool = True) -> None:
    """alpha: online, a member. bravo: online, not a member, with a reason. charlie: offline,
    its pool topic the connection's last will."""
    if with_member:
        publish_board(client, "alpha", "online",
                      {"group": "edgevlm", "member": True, "reason": None,
                       "since": "2026-12-02T10:00:00.000+00:00"},
                      info("alpha"), health(True), base)
    publish_board(client, "bravo", "online",
                  {"group": "edgevlm", "member": False,
                   "reason": "cannot serve: model not loaded",
                   "since": "2026-12-02T10:01:00.000+00:00"},
                  info("bravo", model="qwen3vl-4b", version="0.1.9"),
                  health(False, "model not loaded"), base)
    publish_board(client, "charlie", "offline",
                  {"group": "edgevlm", "member": False, "reason": "connection lost"},
                  info("charlie"), health(True), base)


def status(broker: Broker, *args: str) -> list[str]:
    return ["pool", "status", "--broker", f"{broker.host}:{broker.port}", "--wait", WAIT,
            *args]


def test_the_table_shows_members_and_who_serves_the_pool(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_three_boards(mqtt_client())
    assert main(status(broker)) == 0
    out, err = capsys.readouterr()
    assert out == (
        "NODE     STATE    POOL    GROUP    SERVING  REASON                          "
        "MODEL       VERSION\n"
        "alpha    online   member  edgevlm  yes      -                               "
        "qwen3vl-2b  0.2.0\n"
        "bravo    online   no      edgevlm  no       cannot serve: model not loaded  "
        "qwen3vl-4b  0.1.9\n"
        "charlie  offline  no      edgevlm  yes      connection lost                 "
        "qwen3vl-2b  0.2.0\n"
        "1 of 3 boards in pool group 'edgevlm' serves requests\n")
    assert err == ""


def test_json_lists_the_nodes_the_group_members_and_the_serving_count(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_three_boards(mqtt_client())
    assert main(status(broker, "--json")) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["serving"] == 1
    assert body["group_members"] == {"edgevlm": ["alpha"]}
    nodes = {n["node"]: n for n in body["nodes"]}
    assert [n["node"] for n in body["nodes"]] == ["alpha", "bravo", "charlie"]
    assert nodes["alpha"] == {
        "node": "alpha", "state": "online", "serving": True, "problem": None, "member": True,
        "group": "edgevlm", "reason": None, "since": "2026-12-02T10:00:00.000+00:00",
        "version": "0.2.0", "model": "qwen3vl-2b", "serves_pool": True}
    assert nodes["bravo"]["member"] is False and nodes["bravo"]["serves_pool"] is False
    assert nodes["bravo"]["reason"] == "cannot serve: model not loaded"
    assert nodes["bravo"]["problem"] == "model not loaded"
    assert nodes["charlie"]["state"] == "offline"
    assert nodes["charlie"]["reason"] == "connection lost"
    assert nodes["charlie"]["since"] is None  # the last will has no "since"


def test_no_board_serving_the_pool_exits_1(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_three_boards(mqtt_client(), base="house", with_member=False)
    assert main(status(broker, "--base-topic", "house")) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "0 of 2 boards in pool group 'edgevlm' serve requests"
    assert main(status(broker, "--base-topic", "house", "--json")) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["serving"] == 0 and body["group_members"] == {"edgevlm": []}


def test_an_online_member_of_another_base_topic_does_not_count(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    publish_three_boards(mqtt_client(), base="other")
    assert main(status(broker)) == 3  # nothing under edgevlm/
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"edgevlm pool status: no board under edgevlm/ at 127.0.0.1:"
                          f"{broker.port}")


def test_an_unreachable_broker_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["pool", "status", "--broker", f"127.0.0.1:{port}"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"edgevlm pool status: cannot reach the broker at 127.0.0.1:{port}")


def test_a_bad_broker_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pool", "status", "--broker", "host:port"]) == 2
    assert "the port must be a number" in capsys.readouterr().err
    assert main(["pool"]) == 2
    assert capsys.readouterr().err.startswith("usage: edgevlm pool ")


def test_mqtt_3_1_1_reads_the_same(broker: Broker,
                                   mqtt_client: Callable[..., MqttTestClient],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    publish_three_boards(mqtt_client())
    assert main(status(broker, "--protocol", "3.1.1", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["group_members"] == {"edgevlm": ["alpha"]}


def test_malformed_payloads_are_unknown_and_old_boards_have_no_pool_column(
        broker: Broker, mqtt_client: Callable[..., MqttTestClient],
        capsys: pytest.CaptureFixture[str]) -> None:
    client = mqtt_client()
    publish_board(client, "broken", "online", "{not json", "[1, 2]", '"serving"')
    publish_board(client, "wrongtypes", "online",
                  {"group": 7, "member": "yes", "reason": ["x"]},
                  {"version": 2, "model": "plain-name", "capabilities": "all"},
                  {"serving": "true", "problem": 5})
    publish_board(client, "old", "online", None, info("old", group=None), health(True))
    client.pub("edgevlm/old/bridge/acl_probe", "x", retain=True)     # not a row topic
    client.pub("edgevlm/pool/request/describe", "{}", retain=False)  # neither
    assert main(status(broker, "--json")) == 1
    nodes = {n["node"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert set(nodes) == {"broken", "wrongtypes", "old"}
    for name in ("broken", "wrongtypes"):
        assert {k: nodes[name][k] for k in ("member", "group", "reason", "serving",
                                            "problem", "version")} == {
            "member": None, "group": None, "reason": None, "serving": None,
            "problem": None, "version": None}, name
    assert nodes["wrongtypes"]["model"] == "plain-name"
    assert nodes["old"]["member"] is None and nodes["old"]["group"] is None
    assert main(status(broker)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NODE", "STATE", "POOL", "GROUP", "SERVING", "REASON", "MODEL",
                              "VERSION"]
    assert out[2].split() == ["old", "online", "-", "-", "yes", "-", "qwen3vl-2b", "0.2.0"]
    assert out[-1] == "no board reports a pool group (3 boards found)"


def test_a_cleared_topic_is_forgotten(broker: Broker,
                                      mqtt_client: Callable[..., MqttTestClient],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    client = mqtt_client()
    publish_three_boards(client)
    for name in ("state", "pool", "info", "health"):  # the board was removed for good
        client.pub(f"edgevlm/alpha/bridge/{name}", b"", retain=True)
    assert main(status(broker, "--json")) == 1
    body = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in body["nodes"]] == ["bravo", "charlie"]


def test_the_command_as_a_process(broker: Broker,
                                  mqtt_client: Callable[..., MqttTestClient]) -> None:
    publish_three_boards(mqtt_client())
    done = subprocess.run([sys.executable, "-m", "edgevlm", "pool", "status", "--broker",
                           f"{broker.host}:{broker.port}", "--json"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    body = json.loads(done.stdout)
    assert body["serving"] == 1
    assert body["group_members"] == {"edgevlm": ["alpha"]}
    assert [(n["node"], n["state"], n["member"]) for n in body["nodes"]] == [
        ("alpha", "online", True), ("bravo", "online", False), ("charlie", "offline", False)]


def test_several_groups_get_a_summary_line_each() -> None:
    rows = [node_status("a", {"state": b"online",
                              "pool": b'{"group": "g1", "member": true}'}),
            node_status("b", {"state": b"online",
                              "pool": b'{"group": "g2", "member": true}'}),
            node_status("c", {"state": b"online",
                              "pool": b'{"group": "g2", "member": true}'}),
            NodeStatus("d", state="online")]
    assert render_table(rows).splitlines()[-3:] == [
        "1 of 1 board in pool group 'g1' serves requests",
        "2 of 2 boards in pool group 'g2' serve requests",
        "1 board without a pool group"]
