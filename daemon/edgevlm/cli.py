"""The ``edgevlm`` command line.

Exit codes: 0 success, 1 the work failed (bad media, refused request, runtime error),
2 bad usage or configuration, 3 no broker or no answer in time (``ask``, ``demo``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .wire.errors import EdgevlmError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_ANSWER = 0, 1, 2, 3
_SIZE = re.compile(r"\A(\d+)[xX×](\d+)\Z")


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def cmd_schema(args: argparse.Namespace) -> int:
    from .wire.protocol import request_schema

    text = json.dumps(request_schema(), indent=2, sort_keys=True) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _parse_size(text: str) -> tuple[int, int]:
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT (e.g. 1280x720)")
    width, height = int(match.group(1)), int(match.group(2))
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: width and height must be at least 1")
    return width, height


def cmd_tokens(args: argparse.Namespace) -> int:
    from .vision.decode import MediaPolicy, probe_image
    from .vision.sizing import Family, get_family, image_tokens

    family: Family
    try:
        if args.model is not None:
            if args.family is not None:
                print("edgevlm tokens: give --model or --family, not both", file=sys.stderr)
                return EXIT_USAGE
            from .engine.model import NativeModel, find_model_files, model_family

            family = model_family(NativeModel(find_model_files(args.model)))
        else:
            family = get_family(args.family or "qwen3-vl")
    except (ValueError, OSError, EdgevlmError) as exc:
        message = exc.message if isinstance(exc, EdgevlmError) else str(exc)
        print(f"edgevlm tokens: {message}", file=sys.stderr)
        return EXIT_USAGE
    if not args.size and not args.images:
        print("edgevlm tokens: give --size WIDTHxHEIGHT or one or more image files",
              file=sys.stderr)
        return EXIT_USAGE
    results: list[dict[str, Any]] = []
    status = EXIT_OK
    inputs: list[tuple[str | None, tuple[int, int] | None]] = [(None, s) for s in args.size]
    inputs += [(f, None) for f in args.images]
    policy = MediaPolicy(formats=frozenset({"JPEG", "PNG", "WEBP", "BMP", "GIF", "TIFF"}))
    for file, size in inputs:
        try:
            if file is not None:
                header = probe_image(Path(file).read_bytes(), policy)
                size = (header.width, header.height)
            assert size is not None
            sized = image_tokens(size[0], size[1], family, args.min_pixels, args.max_pixels)
            entry: dict[str, Any] = {"width": size[0], "height": size[1], **sized.to_json()}
            if file is not None:
                entry = {"file": file, **entry}
            results.append(entry)
        except (OSError, EdgevlmError) as exc:
            message = exc.message if isinstance(exc, EdgevlmError) else str(exc)
            print(f"edgevlm tokens: {file or size}: {message}", file=sys.stderr)
            status = EXIT_FAILED
    if results:
        _print_json(results[0] if len(inputs) == 1 else results)
    return status


def cmd_check_config(args: argparse.Namespace) -> int:
    from .config import ConfigError, load_config

    try:
        config = load_config(args.file)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        _print_json(config.redacted())  # passwords, keys and !secret values as ***
    else:
        print(f"{args.file}: configuration is valid")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from .engine import Engine

    content: list[dict[str, Any]] = [{"type": "image", "image": f} for f in args.image]
    if args.video_frames:
        frames = [f for f in args.video_frames.split(",") if f]
        content.append({"type": "video_frames", "video_frames": frames, "fps": args.fps})
    content.append({"type": "text", "text": args.prompt})
    try:
        print(f"edgevlm run: loading {args.model} ...", file=sys.stderr)
        engine = Engine.load(args.model, threads=args.threads, context=args.context,
                             precision=args.precision)
        print(f"edgevlm run: loaded {engine.name} in {engine.load_ms:.0f} ms "
              f"(precision {engine.precision})", file=sys.stderr)
        stream = None if args.json else (lambda t: (sys.stdout.write(t), sys.stdout.flush()))
        params: dict[str, Any] = {"temperature": args.temperature, "seed": args.seed,
                                  "on_text": stream, "want_logits": bool(args.logits_out)}
        result = engine.generate([{"role": "user", "content": content}],
                                 max_tokens=args.max_tokens, **params)
    except (OSError, ValueError, EdgevlmError) as exc:
        message = exc.message if isinstance(exc, EdgevlmError) else str(exc)
        print(f"edgevlm run: {message}", file=sys.stderr)
        return EXIT_FAILED
    if args.logits_out and result.logits is not None:
        np.save(args.logits_out, result.logits)
    if args.json:
        _print_json({"text": result.text, "finish_reason": result.finish_reason,
                     "tokens": result.tokens, "model": engine.name,
                     "usage": {"prompt_tokens": result.prompt_tokens,
                               "vision_tokens": result.vision_tokens,
                               "completion_tokens": len(result.tokens)},
                     "metrics": {k: round(v, 2) for k, v in result.metrics.items()}})
    else:
        sys.stdout.write("\n")  # the streamed answer ends its line
        sys.stdout.flush()
        m = result.metrics
        print(f"[{result.finish_reason}] prompt {result.prompt_tokens} tokens "
              f"(vision {result.vision_tokens}), encode {m['encode_ms']:.0f} ms, prefill "
              f"{m['prefill_ms']:.0f} ms, ttft {m['ttft_ms']:.0f} ms, "
              f"{1000 / m['tpot_ms'] if m['tpot_ms'] else 0:.1f} tok/s", file=sys.stderr)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgevlm", description="A Qwen3-VL vision-language daemon for edge boards that "
        "speaks MQTT.")
    parser.add_argument("--version", action="version", version=f"edgevlm {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from .cli_mqtt import add_mqtt_commands

    add_mqtt_commands(sub)

    p = sub.add_parser("run", help="answer one prompt with a local model (images, video)",
                       description="One user message: the images (in order), the video frames, "
                       "then the text, in the Qwen3-VL chat template.")
    p.add_argument("--model", required=True, help="directory with model.gguf + mmproj.gguf")
    p.add_argument("--image", action="append", default=[], metavar="FILE",
                   help="an image file (JPEG, PNG, WebP, BMP); repeat for several, in order")
    p.add_argument("--video-frames", metavar="F1,F2,...", help="frames of one video, in order")
    p.add_argument("--fps", type=float, default=2.0, help="frame rate of --video-frames")
    p.add_argument("--prompt", required=True, help="the question or instruction (text)")
    p.add_argument("--max-tokens", type=int, default=128,
                   help="most tokens to generate (default 128)")
    p.add_argument("--temperature", type=float, default=None, help="0: greedy; absent: the "
                   "model file's default")
    p.add_argument("--seed", type=int, default=None,
                   help="sampling seed (the same seed and input give the same answer)")
    p.add_argument("--threads", type=int, default=4, help="inference threads (default 4)")
    p.add_argument("--context", type=int, default=4096,
                   help="context size in tokens: prompt + image tokens + max tokens (default "
                   "4096)")
    p.add_argument("--precision", choices=["auto", "exact", "fast"], default="auto",
                   help="prefill/vision arithmetic (and F16/BF16 decode): exact (within "
                   "~1e-5 of float32), fast (llama.cpp's rounding of activations, faster "
                   "on AVX-512 and ARM dot-product) or auto (default: fast for K-quant and "
                   "IQ4 weights, exact otherwise)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--logits-out", metavar="FILE.npy",
                   help="write float32 [steps, vocab] logits of every generated step")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("schema", help="print the JSON Schema of requests and responses")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("tokens", help="image token arithmetic: resized size, grid, tokens",
                       description="Print {resized_width, resized_height, grid: [t, h, w], "
                       "tokens, tokens_with_markers} for a size or image files (sizes are "
                       "WIDTHxHEIGHT; grid is in patches, tokens are LLM tokens).")
    p.add_argument("images", nargs="*", metavar="IMAGE_FILE", help="image files (header only)")
    p.add_argument("--size", action="append", default=[], type=_parse_size,
                   metavar="WIDTHxHEIGHT", help="a size instead of a file (repeatable)")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="use this model's own pixel limits and patch sizes (model.gguf + "
                   "mmproj.gguf, as `edgevlm run --model`), not the family's defaults")
    p.add_argument("--family", default=None,
                   help="the family's default rules: qwen3-vl (default), qwen2.5-vl or qwen2-vl")
    p.add_argument("--min-pixels", type=int, default=None,
                   help="override the minimum (of the model or family)")
    p.add_argument("--max-pixels", type=int, default=None,
                   help="override the maximum (of the model or family), as model.max_pixels")
    p.set_defaults(func=cmd_tokens)

    from .convert.cli import add_convert_parser

    add_convert_parser(sub)

    p = sub.add_parser("check-config", help="validate a YAML configuration file")
    p.add_argument("file", help="the YAML file (e.g. etc/edgevlm.yaml)")
    p.add_argument("--json", action="store_true", help="print the validated configuration")
    p.set_defaults(func=cmd_check_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    result: int = args.func(args)
    return result
