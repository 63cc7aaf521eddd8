"""The MQTT-side commands of ``edgevlm``: ``serve``, ``ask``, ``encode`` and ``demo``.

Thin wrappers: the daemon is :mod:`edgevlm.service`, the client :mod:`edgevlm.ask`, the demo
:mod:`edgevlm.demo`. Exit codes as in :mod:`edgevlm.cli` (3: no broker or no answer in time).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from .wire.errors import EdgevlmError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_ANSWER = 0, 1, 2, 3


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    if not args.verbose:  # the daemon's own log lines would drown the answers
        logging.getLogger().setLevel(logging.WARNING)
    return run_demo(json_output=args.json, broker=args.broker, config_file=args.config,
                    broker_kind=args.broker_kind, threads=args.threads, timeout=args.timeout)


_SERVE_FLAGS = {"mqtt_host": "mqtt.host", "mqtt_port": "mqtt.port",
                "mqtt_username": "mqtt.username", "base_topic": "mqtt.base_topic",
                "node_id": "mqtt.node_id", "client_id": "mqtt.client_id",
                "protocol": "mqtt.protocol", "model": "model.path", "threads": "model.threads",
                "context": "model.context", "precision": "model.precision",
                "max_queue": "limits.max_queue", "http_host": "http.host",
                "http_port": "http.port"}


def serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted config overrides from the ``serve`` flags (``--set KEY=VALUE`` last)."""
    import yaml

    overrides = {key: getattr(args, flag) for flag, key in _SERVE_FLAGS.items()
                 if getattr(args, flag) is not None}
    if args.no_discovery:
        overrides["homeassistant.discovery"] = False
    if args.no_zeroconf:
        overrides["zeroconf.enabled"] = False
    if args.http:
        overrides["http.enabled"] = True
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: write KEY=VALUE, e.g. --set limits.max_queue=4")
        overrides[key.strip()] = yaml.safe_load(value) if value else None
    return overrides


def cmd_serve(args: argparse.Namespace) -> int:
    from .config import ConfigError, default_config, load_config

    if args.log_level:
        logging.getLogger().setLevel(args.log_level.upper())
    try:
        overrides = serve_overrides(args)
        config = (load_config(args.config, overrides=overrides) if args.config
                  else default_config(overrides=overrides))
    except (ConfigError, ValueError) as exc:
        print(f"edgevlm serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from .service import serve_main

    code: int = serve_main(config)
    return code


def cmd_ask(args: argparse.Namespace) -> int:
    from . import ask

    try:
        host, port = ask.parse_broker(args.broker) if args.broker else ask.default_broker()
        parts = [ask.image_file_part(f) for f in args.image]
        parts += [ask.vision_tokens_part(f) for f in args.vision_tokens]
    except (OSError, ValueError) as exc:
        print(f"edgevlm ask: {exc}", file=sys.stderr)
        return EXIT_USAGE
    request = ask.describe_request(args.prompt, parts, max_tokens=args.max_tokens,
                                   stream=args.stream)
    if args.temperature is not None:
        request["temperature"] = args.temperature

    def on_chunk(chunk: dict[str, Any]) -> None:
        text = json.dumps(chunk, ensure_ascii=False) + "\n" if args.json else chunk["text"]
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        with ask.DescribeClient(host, port, base_topic=args.base_topic, protocol=args.protocol,
                                username=args.username,
                                password=args.password or os.environ.get(
                                    "EDGEVLM_MQTT__PASSWORD")) as client:
            client.connect(args.timeout)
            node = None if args.pool else args.node
            if node is None and not args.pool:
                nodes = client.online_nodes()
                if len(nodes) != 1:
                    print(f"edgevlm ask: {len(nodes)} nodes online under {args.base_topic}/ "
                          f"({', '.join(nodes) or 'none'}); pick one with --node or use --pool",
                          file=sys.stderr)
                    return EXIT_NO_ANSWER if not nodes else EXIT_USAGE
                node = nodes[0]
            retry = ask.PoolRetry() if args.pool and not args.no_retry else None
            answer = client.ask(request, node, args.timeout, on_chunk if args.stream else None,
                                retry=retry)
    except (ask.BrokerUnavailable, ask.NoAnswer) as exc:
        print(f"edgevlm ask: {exc}", file=sys.stderr)
        return EXIT_NO_ANSWER
    except ValueError as exc:
        print(f"edgevlm ask: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    if answer.get("status") != "ok":
        err = answer.get("error") or {}
        print(f"edgevlm ask: {err.get('type')} ({err.get('code')}): {err.get('message')}",
              file=sys.stderr)
        return EXIT_FAILED
    if not args.json:
        sys.stdout.write("\n" if args.stream else answer["data"]["text"] + "\n")
        print(ask.metrics_line(answer), file=sys.stderr)
    return EXIT_OK


def cmd_pool_status(args: argparse.Namespace) -> int:
    import os

    from . import ask, pool_status

    try:
        host, port = ask.parse_broker(args.broker) if args.broker else ask.default_broker()
    except ValueError as exc:
        print(f"edgevlm pool status: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.wait < 0:
        print("edgevlm pool status: --wait must be 0 or more seconds", file=sys.stderr)
        return EXIT_USAGE
    password = (args.password if args.password is not None
                else os.environ.get("EDGEVLM_MQTT__PASSWORD"))
    try:
        rows = pool_status.collect(host, port, base_topic=args.base_topic, wait_s=args.wait,
                                   protocol=args.protocol, username=args.username,
                                   password=password)
    except ask.BrokerUnavailable as exc:
        print(f"edgevlm pool status: {exc}", file=sys.stderr)
        return EXIT_NO_ANSWER
    if args.json:
        sys.stdout.write(json.dumps(pool_status.to_json(rows), ensure_ascii=False) + "\n")
    elif rows:
        sys.stdout.write(pool_status.render_table(rows))
    if not rows:
        print(f"edgevlm pool status: no board under {args.base_topic}/ at {host}:{port}: "
              f"no retained {args.base_topic}/+/bridge/... within {args.wait:g} s (none "
              "published, or the broker's ACL hides them)", file=sys.stderr)
        return EXIT_NO_ANSWER
    return EXIT_OK if pool_status.serving_count(rows) else EXIT_FAILED


def cmd_encode(args: argparse.Namespace) -> int:
    from .engine import Engine
    from .models import demo_model_dir
    from .wire.vision_tokens import encode_vision_tokens

    model = args.model or str(demo_model_dir())
    try:
        engine = Engine.load(model, threads=args.threads, context=256,
                             max_pixels=args.max_pixels)
        features = engine.encode_image(Path(args.image))
        payload = encode_vision_tokens(features, dtype=args.dtype, layout=args.layout)
    except (OSError, ValueError, EdgevlmError) as exc:
        message = exc.message if isinstance(exc, EdgevlmError) else str(exc)
        print(f"edgevlm encode: {message}", file=sys.stderr)
        return EXIT_FAILED
    text = json.dumps(payload) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
    print(f"edgevlm encode: {args.image} -> {args.output}: grid {list(features.grid)}, "
          f"{features.n_tokens} tokens x {features.hidden_size}, DeepStack "
          f"{features.deepstack_layers}, {len(text)} bytes ({engine.name})", file=sys.stderr)
    return EXIT_OK


def _broker_arg(text: str) -> tuple[str, int]:
    from .ask import parse_broker

    try:
        return parse_broker(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_broker_flags(p: argparse.ArgumentParser, protocol_help: str) -> None:
    """The flags of a command that talks to the daemons through a broker."""
    p.add_argument("--broker", metavar="HOST[:PORT]", help="default: EDGEVLM_MQTT__HOST/PORT "
                   "or localhost:1883")
    p.add_argument("--base-topic", default="edgevlm", help="the daemons' mqtt.base_topic "
                   "(default edgevlm)")
    p.add_argument("--protocol", choices=["5", "3.1.1"], default="5", help=protocol_help)
    p.add_argument("--username", help="broker user name")
    p.add_argument("--password", help="broker password (or EDGEVLM_MQTT__PASSWORD)")


def add_mqtt_commands(sub: Any) -> None:
    """``serve``, ``ask``, ``encode`` and ``demo``."""
    p = sub.add_parser("serve", help="run the MQTT daemon",
                       description="Every option is also a config key (-c FILE), an env "
                       "variable EDGEVLM_<SECTION>__<KEY>, or --set SECTION.KEY=VALUE; flags "
                       "win over env, env over the file.")
    p.add_argument("-c", "--config", metavar="FILE", help="YAML config (etc/edgevlm.yaml)")
    p.add_argument("--mqtt-host", metavar="HOST", help="mqtt.host: the broker (absent: "
                   "zeroconf browsing, then localhost)")
    p.add_argument("--mqtt-port", type=int, metavar="PORT", help="mqtt.port (default 1883)")
    p.add_argument("--mqtt-username", metavar="USER", help="mqtt.username (the password: "
                   "mqtt.password in the file, with !secret or !env)")
    p.add_argument("--base-topic", metavar="TOPIC", help="mqtt.base_topic (default edgevlm)")
    p.add_argument("--node-id", metavar="ID", help="mqtt.node_id: topics are "
                   "<base>/<node_id>/... (default: the host name)")
    p.add_argument("--client-id", metavar="ID", help="mqtt.client_id (default "
                   "edgevlm-<node_id>); unique on the broker")
    p.add_argument("--protocol", choices=["5", "3.1.1"], help="mqtt.protocol (default 5)")
    p.add_argument("--model", metavar="DIR", help="model.gguf + mmproj.gguf (default: the "
                   "bundled demo model)")
    p.add_argument("--threads", type=int, help="model.threads: inference threads (default 4)")
    p.add_argument("--context", type=int, help="model.context: tokens of prompt + images + "
                   "answer (default 4096)")
    p.add_argument("--precision", choices=["auto", "exact", "fast"], help="model.precision")
    p.add_argument("--max-queue", type=int, help="limits.max_queue: requests waiting before "
                   "answers are busy (default 8)")
    p.add_argument("--no-discovery", action="store_true", help="no Home Assistant discovery")
    p.add_argument("--no-zeroconf", action="store_true", help="no zeroconf announcement")
    p.add_argument("--http", action="store_true", help="http.enabled: also serve the OpenAI "
                   "and Ollama APIs (docs/http.md)")
    p.add_argument("--http-host", metavar="HOST", help="http.host (default 127.0.0.1; beyond "
                   "loopback set http.api_key)")
    p.add_argument("--http-port", type=int, metavar="PORT", help="http.port (default 11434)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config key, e.g. --set cameras.door.prompt='Who is there?'")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                   help="log level (default info; -v is debug)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("ask", help="send one describe request over MQTT and print the answer",
                       description="Exit codes: 0 answered, 1 error answer, 2 usage, "
                       "3 no broker or no answer in time.")
    p.add_argument("prompt", help="the question or instruction")
    _add_broker_flags(p, "MQTT version (default 5; 3.1.1 matches the answer by transaction)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--node", help="the daemon's node id (default: the only one online)")
    target.add_argument("--pool", action="store_true", help="send to the shared pool; "
                        "sent again (same id) when the pool goes silent about it or answers "
                        "busy, until --timeout")
    p.add_argument("--no-retry", action="store_true", help="with --pool: publish once, never "
                   "again")
    p.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image file to send; repeat for several, in order")
    p.add_argument("--vision-tokens", action="append", default=[], metavar="FILE",
                   help="a payload written by `edgevlm encode`")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens to generate (default: the daemon's, 128)")
    p.add_argument("--temperature", type=float, default=None,
                   help="0: greedy; absent: the model file's default")
    p.add_argument("--stream", action="store_true", help="print partial text as it comes")
    p.add_argument("--json", action="store_true", help="print the answer envelope as JSON")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for the answer (default 60; then exit 3)")
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("pool", help="the shared pool of boards: `edgevlm pool status`",
                       description="The boards that split the requests sent to "
                       "<base>/pool/request/<verb>.")
    pool_parser = p

    def cmd_pool(args: argparse.Namespace) -> int:  # `edgevlm pool` without a subcommand
        pool_parser.print_help(sys.stderr)
        return EXIT_USAGE

    p.set_defaults(func=cmd_pool)
    pool = p.add_subparsers(dest="pool_command", metavar="SUBCOMMAND",
                             help="status: which boards are in the pool and serve")
    p = pool.add_parser("status", help="which boards are pool members and serve it",
                        description="Reads the retained <base>/+/bridge/state, pool, info and "
                        "health topics and prints one row per board. A board serves the pool "
                        "when it is online and a member of its pool group. Exit codes: 0 at "
                        "least one board serves the pool, 1 boards found but none serves it, "
                        "2 usage, 3 no broker or no board.")
    _add_broker_flags(p, "MQTT version (default 5)")
    p.add_argument("--wait", type=float, default=1.5, metavar="S",
                   help="seconds to collect the retained bridge topics (default 1.5)")
    p.add_argument("--json", action="store_true", help="print {nodes, group_members, serving} "
                   "as JSON")
    p.set_defaults(func=cmd_pool_status)

    p = sub.add_parser("encode", help="compute a vision_tokens payload on this machine",
                       description="Runs the model's vision encoder on IMAGE and writes the "
                       "JSON vision_tokens payload a board with the same model accepts.")
    p.add_argument("image", metavar="IMAGE", help="the image file to encode")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file, or - for stdout")
    p.add_argument("--model", metavar="DIR", help="default: the bundled demo model")
    p.add_argument("--dtype", choices=["f32", "f16"], default="f32",
                   help="feature precision on the wire (f16: half the bytes)")
    p.add_argument("--layout", choices=["separate", "packed"], default="separate",
                   help="separate: tokens_b64 + ds_b64; packed: one array of rows")
    p.add_argument("--threads", type=int, default=4, help="inference threads (default 4)")
    p.add_argument("--max-pixels", type=int, default=1_003_520,
                   help="resize cap, as the board's model.max_pixels (default 1003520)")
    p.set_defaults(func=cmd_encode)

    p = sub.add_parser("demo", help="zero-config end-to-end run: broker, daemon, sample "
                       "frames through MQTT", description="Uses the configured broker if it "
                       "answers, else starts a private one (mosquitto, or the embedded one).")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per answer, then a summary object")
    p.add_argument("--broker", type=_broker_arg, metavar="HOST[:PORT]",
                   help="use this broker if it answers (else a private one)")
    p.add_argument("-c", "--config", metavar="FILE", help="take the broker from this config")
    p.add_argument("--broker-kind", choices=["auto", "mosquitto", "embedded"], default="auto",
                   help="force a private broker of this kind")
    p.add_argument("--threads", type=int, default=2, help="inference threads (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="per answer")
    p.set_defaults(func=cmd_demo)
