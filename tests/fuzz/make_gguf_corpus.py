#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_gguf into tests/fuzz/corpus/gguf/ (small valid and broken
GGUF files). Standard library only, so the corpus can be rebuilt anywhere:
    python3 tests/fuzz/make_gguf_corpus.py
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "corpus" / "gguf"

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (elements per block, bytes per block)
LAYOUT = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          20: (32, 18), 23: (256, 136), 24: (1, 1), 30: (1, 2)}
# the block types edgevlm runs (ggml id -> name, byte offsets of the float16 scales in a block:
# d, then dmin / m), as native/src/types.h lays them out
BLOCK_TYPES = {2: ("q4_0", (0,)), 3: ("q4_1", (0, 2)), 6: ("q5_0", (0,)), 7: ("q5_1", (0, 2)),
               8: ("q8_0", (0,)), 10: ("q2_K", (80, 82)), 11: ("q3_K", (108,)),
               12: ("q4_K", (0, 2)), 13: ("q5_K", (0, 2)), 14: ("q6_K", (208,)),
               20: ("iq4_nl", (0,)), 23: ("iq4_xs", (0,))}
NAN_F16, INF_F16 = 0x7E00, 0x7C00


def blocks(typ: int, n_blocks: int, seed: int, bad: int | None = None,
           bad_bits: int = NAN_F16) -> bytes:
    """n_blocks random blocks of type typ with finite float16 scales (small ones, and the
    extremes: +-65504, a subnormal, 0); block `bad` gets bad_bits as its last scale."""
    rnd = random.Random(seed)
    size = LAYOUT[typ][1]
    out = bytearray()
    for b in range(n_blocks):
        blk = bytearray(rnd.getrandbits(8) for _ in range(size))
        for k, at in enumerate(BLOCK_TYPES[typ][1]):
            kind = (b + k) % 6
            bits = {0: 0x7BFF, 1: 0xFBFF, 2: 0x0001, 3: 0x0000}.get(kind)
            if bits is None:
                bits = struct.unpack("<H", struct.pack("<e", rnd.uniform(-0.1, 0.1)))[0]
            blk[at:at + 2] = struct.pack("<H", bits)
        if b == bad:
            at = BLOCK_TYPES[typ][1][-1]
            blk[at:at + 2] = struct.pack("<H", bad_bits)
        out += blk
    return bytes(out)


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
         version: int = 3, align: int = 32, payload: dict[str, bytes] | None = None) -> bytes:
    """tensors: (name, ne innermost first, ggml type); laid out in order, aligned; a tensor's
    data is payload[name] when given (its exact size), else a byte pattern."""
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
        blob = payload.get(name) if payload else None
        data += blob if blob is not None else bytes((i * 37 + 11) & 0xFF for i in range(nbytes))
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
    # the block types: per type a valid file of two matrices (rows of 2 blocks, random codes,
    # finite scales), one with a NaN scale (row 1) and one with an infinite scale (row 0, in
    # an F32-free file) and one whose last block is cut short; one file with every type
    arch = [("general.architecture", STR, "qwen3vl")]
    every = []
    every_payload = {}
    for typ, (tname, _) in BLOCK_TYPES.items():
        blck, size = LAYOUT[typ]
        mats = [(f"blk.0.{tname}_a.weight", [2 * blck, 3], typ),
                (f"blk.0.{tname}_b.weight", [blck, 2], typ)]
        payload = {mats[0][0]: blocks(typ, 6, typ), mats[1][0]: blocks(typ, 2, 1000 + typ)}
        valid[f"type_{tname}.gguf"] = gguf(arch, mats, payload=payload)
        valid[f"type_{tname}_nan_scale.gguf"] = gguf(
            arch, mats, payload={**payload, mats[0][0]: blocks(typ, 6, typ, bad=3)})
        valid[f"type_{tname}_inf_scale.gguf"] = gguf(
            [], mats[1:], payload={mats[1][0]: blocks(typ, 2, typ, bad=0, bad_bits=INF_F16)})
        broken[f"type_{tname}_truncated.gguf"] = valid[f"type_{tname}.gguf"][:-size // 2]
        every.append((f"{tname}.weight", [blck, 1], typ))
        every_payload[f"{tname}.weight"] = blocks(typ, 1, 2000 + typ)
    valid["every_block_type.gguf"] = gguf(arch, every, payload=every_payload)
    # general.alignment 1 puts a Q4_K matrix at an odd address: the loader read its blocks
    # through a misaligned pointer (UBSan); it now refuses the tensor
    broken["regress_misaligned_block.gguf"] = gguf(
        [("general.alignment", U32, 1)],
        [("pad.weight", [2], 24),  # I8: 2 bytes shift the next tensor off 2-byte alignment
         ("w.weight", [256, 1], 12), ("f.weight", [3, 1], 0)],
        align=1, payload={"w.weight": blocks(12, 1, 5)})
    # no data: 2^62 values a row, 0 rows (the harness once computed the row's bytes unchecked)
    broken["regress_empty_huge_row.gguf"] = gguf(arch, [("e.weight", [2**62, 0], 12)])
    for name, data in {**valid, **broken}.items():
        (OUT / name).write_bytes(data)
    total = sum(len(d) for d in {**valid, **broken}.values())
    print(f"wrote {len(valid) + len(broken)} files, {total} bytes, to {OUT}")


if __name__ == "__main__":
    main()
