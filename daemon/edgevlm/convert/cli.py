"""``edgevlm convert HF_DIR -o OUT_DIR``: the command line of the converter.

Exit codes: 0 converted, 1 the conversion failed (I/O), 2 bad input or usage (missing files,
not a Qwen3-VL checkpoint, unsupported dtype, bad option, the ``gguf`` package not installed).
Progress goes to standard error; ``--json`` prints a summary object on standard output.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import ConvertError

if TYPE_CHECKING:
    from .gguf_stream import ProgressEvent

# The gguf package (the `convert` extra) is imported only when a conversion runs, so the
# edgevlm command works without it. tests/unit/test_convert_cli.py checks them against the
# converter's type table (convert/pipeline.py).
# One line per --type for --help (the mixes' per-tensor tables: docs/convert.md).
TEXT_TYPE_HELP = {
    "f32": "every matrix float32 (no rounding)",
    "f16": "every matrix float16 (the default)",
    "bf16": "every matrix bfloat16",
    "q8_0": "every matrix Q8_0 (8.5 bits a weight)",
    "q4_0": "every matrix Q4_0 (4.5 bits a weight; no llama.cpp mix)",
    "q4_k_m": "llama.cpp's Q4_K_M mix: Q4_K, Q6_K for output and about half of attn_v, ffn_down",
    "q5_k_m": "llama.cpp's Q5_K_M mix: Q5_K, Q6_K for output and about half of attn_v, ffn_down",
    "q6_k": "llama.cpp's Q6_K: every matrix Q6_K",
    "q3_k_m": "llama.cpp's Q3_K_M mix: Q3_K, Q4_K/Q5_K for attn_v, attn_output, ffn_down",
    "iq4_xs": "llama.cpp's IQ4_XS mix: IQ4_XS, Q5_K for the first ffn_down (and attn_v at GQA>=4)",
}
TEXT_TYPES = tuple(TEXT_TYPE_HELP)
# One line per --vision-type (every vision matrix in one type; the K types' fallback: 256-wide
# blocks, as llama.cpp's tensor_type_fallback).
VISION_TYPE_HELP = {
    "f32": "every vision matrix float32 (the default with --type f32)",
    "f16": "every vision matrix float16 (the default)",
    "bf16": "every vision matrix bfloat16",
    "q8_0": "every vision matrix Q8_0 (8.5 bits a weight)",
    "q4_k": "every vision matrix Q4_K (4.5 bits a weight); rows not a multiple of 256 -> Q5_0",
    "q6_k": "every vision matrix Q6_K (6.56 bits a weight); rows not a multiple of 256 -> Q8_0",
}
VISION_TYPES = tuple(VISION_TYPE_HELP)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _ProgressPrinter:
    """``[i/N] file tensor TYPE  X.X MB written`` on stderr (one line per tensor, or one
    self-overwriting line on a terminal)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()

    def __call__(self, ev: ProgressEvent) -> None:
        line = (f"[{ev.index}/{ev.total}] {ev.file} {ev.tensor} {ev.qtype}  "
                f"{ev.bytes_written / 1e6:.1f} MB written")
        if self._tty:
            end = "\n" if ev.index == ev.total else ""
            sys.stderr.write(f"\r\033[K{line}{end}")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _missing_extra(exc: ImportError) -> str:
    """One line for a converter whose optional dependency is missing or too old."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return (f"needs the {exc.name.split('.')[0]} package, which a plain install leaves "
                "out; install it with: pip install 'edgevlm[convert]'")
    return (f"the installed gguf package is too old or broken ({exc}); upgrade it with: "
            "pip install -U 'edgevlm[convert]'")


def _configure(parser: argparse.ArgumentParser) -> None:
    # HF_DIR and -o are required, but checked in cmd_convert after the gguf package: on a bare
    # install `edgevlm convert` first says what to install.
    parser.add_argument("hf_dir", metavar="HF_DIR", nargs="?",
                        help="transformers Qwen3-VL checkpoint directory (config.json, "
                             "*.safetensors, tokenizer.json, preprocessor_config.json, ...)")
    parser.add_argument("-o", "--output", metavar="OUT_DIR",
                        help="directory to write model.gguf and mmproj.gguf into (required)")
    parser.add_argument("--type", dest="text_type", default="f16", choices=TEXT_TYPES,
                        metavar="TYPE",
                        help="storage type of the text model's matrices, or a llama.cpp "
                             "K-quant mix: one of the text types listed below (default f16)")
    parser.add_argument("--vision-type", default=None, choices=VISION_TYPES, metavar="VTYPE",
                        help="storage type of the vision tower's matrices: one of the vision "
                             "types listed below (default f16, also with the K-quant mixes; "
                             "f32 with --type f32)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(convert_usage=parser.format_usage())


def _types_epilog() -> str:
    width = max(map(len, TEXT_TYPES))
    text = [f"  {name:<{width}}  {line}" for name, line in TEXT_TYPE_HELP.items()]
    vision = [f"  {name:<{width}}  {line}" for name, line in VISION_TYPE_HELP.items()]
    return ("text types (--type):\n" + "\n".join(text) + "\n\nvision types (--vision-type):\n"
            + "\n".join(vision) + "\n\nMatrices whose rows do not divide into a type's blocks "
            "fall back as in llama.cpp (Q4_K -> Q5_0,\nQ6_K -> Q8_0, ...), then to F16 when "
            "not a multiple of 32 either (docs/convert.md).")


def cmd_convert(args: argparse.Namespace) -> int:
    """Run a conversion from parsed arguments; errors become a message and an exit code."""
    try:
        from .pipeline import convert_checkpoint
    except ImportError as exc:  # checked before the arguments: a bare install learns it first
        print(f"edgevlm convert: {_missing_extra(exc)}", file=sys.stderr)
        return EXIT_USAGE
    missing = [name for name, value in (("HF_DIR", args.hf_dir), ("-o/--output", args.output))
               if value is None]
    if missing:
        sys.stderr.write(f"{args.convert_usage}edgevlm convert: error: the following arguments "
                         f"are required: {', '.join(missing)}\n")
        return EXIT_USAGE
    _quiet_gguf_logging()
    try:
        result = convert_checkpoint(args.hf_dir, args.output, args.text_type, args.vision_type,
                                    progress=None if args.quiet else _ProgressPrinter())
    except ConvertError as exc:
        print(f"edgevlm convert: {exc.message}", file=sys.stderr)
        return exc.exit_code
    summary: dict[str, Any] = result.to_json()
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not args.quiet:
        print(f"wrote {result.text_path} ({result.text_bytes / 1e6:.1f} MB, {result.text_type}) "
              f"and {result.mmproj_path} ({result.vision_bytes / 1e6:.1f} MB, "
              f"{result.vision_type}) in {result.seconds:.1f} s", file=sys.stderr)
    return EXIT_OK


def add_convert_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``convert`` on an ``argparse`` subparsers object (``set_defaults(func=...)``
    takes the namespace and returns the exit code, like the other edgevlm commands)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "convert", help="convert a transformers Qwen3-VL checkpoint to model.gguf + mmproj.gguf",
        description="Convert a Hugging Face Qwen3-VL checkpoint directory into the GGUF pair "
                    "edgevlm (and llama.cpp) loads: OUT_DIR/model.gguf (text) and "
                    "OUT_DIR/mmproj.gguf (vision). Needs the gguf package: "
                    "pip install 'edgevlm[convert]'. Exit codes: 0 ok, 1 failed, 2 bad input.",
        epilog=_types_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(parser)
    parser.set_defaults(func=cmd_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m edgevlm.convert.cli HF_DIR -o OUT_DIR``."""
    parser = argparse.ArgumentParser(prog="edgevlm convert",
                                     description="Convert a Qwen3-VL checkpoint to GGUF.",
                                     epilog=_types_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return cmd_convert(args)


def _quiet_gguf_logging() -> None:
    """gguf's writer logs every file at INFO ("This GGUF file is for Little Endian only")."""
    logging.getLogger("gguf").setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main())
