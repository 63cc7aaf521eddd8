#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_gguf into tests/fuzz/corpus/gguf/ (small valid and broken
GGUF files). Standard library only, so the corpus can be rebuilt anywhere:
    python3 tests/fuzz/make_gguf_corpus.py
"""

from __future__ import annotations

import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "corpus" / "gguf"

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (elements per block, bytes per block)
LAYOUT = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 30: (1, 2)}


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype: int, v: object) -> bytes:
    if vtype == STR:
        return gstr(v)  # type: ignore[arg-type]
    if vtype == ARR:
        etype, items = v  # type: ignore[misc]
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, i) for i in items)
    return struct.pack(SCALAR[vtype], v)


def gguf(kvs: list[tuple[str, int, object]], tensors: list[tuple[str, list[int], int]],
         version: int = 3, align: int = 32) -> bytes:
    """tensors: (name, ne innermost first, ggml type); laid out in order, aligned."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    data = bytearray()
    for name, ne, typ in tensors:
        blck, size = LAYOUT[typ]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // blck * size
        data += bytes((len(data) + align - 1) // align * align - len(data))
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", typ, len(data))
        data += bytes((i * 37 + 11) & 0xFF for i in range(nbytes))
    out += bytes((len(out) + align - 1) // align * align - len(out))
    return bytes(out + data)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    every_type = [
        ("general.architecture", STR, "qwen3vl"), ("t.u8", U8, 200), ("t.i8", I8, -5),
        ("t.u16", U16, 60000), ("t.i16", I16, -300), ("t.u32", U32, 28), ("t.i32", I32, -7),
        ("t.f32", F32, 1e-6), ("t.bool", BOOL, True), ("t.u64", U64, 2**40),
        ("t.i64", I64, -(2**40)), ("t.f64", F64, 5e6),
        ("qwen3vl.rope.dimension_sections", ARR, (I32, [24, 20, 20, 0])),
        ("clip.vision.image_mean", ARR, (F32, [0.5, 0.5, 0.5])),
        ("clip.vision.is_deepstack_layers", ARR, (BOOL, [i in (5, 11, 17) for i in range(24)])),
        ("a.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x", "yz"]), (ARR, [(I64, [3])])])),
    ]
    tensors = [("token_embd.weight", [64, 4], 8), ("blk.0.attn_norm.weight", [64], 0),
               ("blk.0.attn_q.weight", [64, 2], 2), ("v.patch_embd.weight", [4, 4, 3, 2], 1),
               ("mm.0.weight", [8, 2], 30), ("odd.weight", [256], 12)]
    tokens = [f"tok{i}" for i in range(200)] + ["", "Ġthe", "<|im_end|>"]
    tok_kvs = [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
               ("tokenizer.ggml.token_type", ARR, (I32, [1] * len(tokens))),
               ("tokenizer.ggml.eos_token_id", U32, 151645)]
    valid = {
        "every_type.gguf": gguf(every_type, tensors),
        "tokenizer.gguf": gguf(tok_kvs, [("output_norm.weight", [16], 0)]),
        "v2.gguf": gguf(every_type[:4], tensors[:2], version=2),
        "align64.gguf": gguf([("general.alignment", U32, 64)], tensors[:3], align=64),
        "no_tensors.gguf": gguf(every_type[:3], []),
        "empty.gguf": gguf([], []),
    }
    base = valid["every_type.gguf"]
    broken = {
        "truncated.gguf": base[: len(base) // 2],
        "bad_magic.gguf": b"GGUG" + base[4:],
        "version1.gguf": base[:4] + struct.pack("<I", 1) + base[8:],
        "big_endian.gguf": base[:4] + struct.pack(">I", 3) + base[8:],
        "huge_n_kv.gguf": base[:16] + struct.pack("<Q", 2**62) + base[24:],
        "dup_keys.gguf": gguf([("k", U8, 1), ("k", U8, 2)], []),
        "dup_tensors.gguf": gguf([], [("a", [8], 0), ("a", [8], 0)]),
        "bad_align.gguf": gguf([("general.alignment", U32, 3)], tensors[:1]),
        "unknown_type.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + gstr("k")
        + struct.pack("<II", 13, 0),
    }
    for name, data in {**valid, **broken}.items():
        (OUT / name).write_bytes(data)
    total = sum(len(d) for d in {**valid, **broken}.values())
    print(f"wrote {len(valid) + len(broken)} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
