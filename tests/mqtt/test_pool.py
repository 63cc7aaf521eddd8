"""The shared pool: two daemons on one ``$share`` group answer each request exactly once."""

from __future__ import annotations

import json
from collections import Counter

from tests.helpers import text, user_request
from tests.mqtt.conftest import v5_properties, wait_until

N_REQUESTS = 12


def test_two_daemons_in_one_shared_group_answer_each_pooled_request_once(
        make_service, mqtt_client):
    services = [make_service(**{"mqtt.node_id": node, "mqtt.shared_group": "team"})
                for node in ("n1", "n2")]
    client = mqtt_client()
    reply = "edgevlm/clients/pool/reply"
    client.sub(reply)
    for i in range(N_REQUESTS):
        client.pub("edgevlm/pool/request/describe",
                   user_request(text(f"question {i}"), id=f"pool-{i}", max_tokens=4),
                   properties=v5_properties(reply, f"c{i}".encode()))
    client.inbox.wait(reply, count=N_REQUESTS)
    wait_until(lambda: sum(s.metrics.snapshot()["requests"]["answered"] for s in services)
               == N_REQUESTS, what="both daemons' counters")
    answers = [json.loads(m.payload) for m in client.inbox.on(reply)]
    ids = Counter(a["id"] for a in answers)
    assert ids == Counter({f"pool-{i}": 1 for i in range(N_REQUESTS)})
    assert all(a["status"] == "ok" for a in answers)
    answered = [s.metrics.snapshot()["requests"]["answered"] for s in services]
    assert sum(answered) == N_REQUESTS
    assert all(n > 0 for n in answered), f"the broker should spread the load: {answered}"


def test_pool_subscription_can_be_disabled(make_service, mqtt_client):
    make_service(**{"mqtt.shared_group": None})
    client = mqtt_client()
    client.sub("edgevlm/+/response/describe", "edgevlm/node1/bridge/state")
    client.inbox.wait("edgevlm/node1/bridge/state")
    client.pub("edgevlm/pool/request/describe", user_request(text("hi"), id="p-off"))
    client.pub("edgevlm/node1/request/describe", user_request(text("hi"), id="direct"))
    answers = client.inbox.json("edgevlm/+/response/describe")
    assert [a["id"] for a in answers] == ["direct"]
