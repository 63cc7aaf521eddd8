"""A loaded model pair: the native handle, its hyperparameters and what its metadata says about
tokenizer, special tokens, sampling defaults and preprocessing."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.native import c_string, ffi, lib, load_error
from ..tokenizer import HFTokenizer
from ..vision.sizing import Family, get_family
from .families import ModelFamily, family_for

_new_uncleared = ffi.new_allocator(should_clear_after_alloc=False)

log = logging.getLogger(__name__)

TEXT, VISION = 0, 1
TEXT_FILE, VISION_FILE = "model.gguf", "mmproj.gguf"


@dataclass(frozen=True)
class ModelFiles:
    text: Path
    mmproj: Path | None

    @property
    def name(self) -> str:
        return self.text.parent.name if self.text.name == TEXT_FILE else self.text.stem


def find_model_files(path: str | os.PathLike[str]) -> ModelFiles:
    """``DIR`` with model.gguf (+ mmproj.gguf), or a text .gguf file (+ a sibling mmproj*.gguf)."""
    p = Path(path)
    if p.is_dir():
        text = p / TEXT_FILE
        if not text.is_file():
            ggufs = sorted(f for f in p.glob("*.gguf") if not f.name.startswith("mmproj"))
            if len(ggufs) != 1:
                raise FileNotFoundError(f"{p}: expected {TEXT_FILE} (+ {VISION_FILE}) in the "
                                        f"directory, found {[f.name for f in p.glob('*.gguf')]}")
            text = ggufs[0]
        directory = p
    elif p.is_file():
        text, directory = p, p.parent
    else:
        raise FileNotFoundError(f"{p}: no such model file or directory")
    mmproj = directory / VISION_FILE
    if not mmproj.is_file():
        candidates = sorted(directory.glob("mmproj*.gguf"))
        mmproj = candidates[0] if len(candidates) == 1 else Path()
    return ModelFiles(text, mmproj if mmproj.name else None)


@dataclass(frozen=True)
class SpecialTokens:
    image_pad: int
    video_pad: int
    vision_start: int
    vision_end: int
    eos: frozenset[int]


class NativeModel:
    """Owns an ``edgevlm_model*``; metadata accessors read the GGUF key/values."""

    def __init__(self, files: ModelFiles) -> None:
        self.files = files
        out = ffi.new("edgevlm_model **")
        err = ffi.new("char[1024]")
        mmproj = str(files.mmproj).encode() if files.mmproj else ffi.NULL
        status = lib.edgevlm_model_load(str(files.text).encode(), mmproj, out, err, 1024)
        if status != lib.EDGEVLM_OK:
            raise load_error(status, c_string(err))
        self.handle = ffi.gc(out[0], lib.edgevlm_model_free)
        info = ffi.new("edgevlm_model_info *")
        lib.edgevlm_model_get_info(self.handle, info)
        self.info: dict[str, Any] = {
            name: (list(getattr(info, name)) if isinstance(getattr(info, name), ffi.CData)
                   else getattr(info, name))
            for name in dir(info)}
        self._lock = threading.Lock()

    def prefault(self, which: int | None = None) -> int:
        """Maps the files' pages now (C, without the GIL): both files, or the text file
        (``which=0``) or the mmproj file (``which=1``); returns the bytes mapped."""
        if which is None:
            return int(lib.edgevlm_model_prefault(self.handle))
        return int(lib.edgevlm_model_prefault_file(self.handle, which))

    def release_metadata(self) -> None:
        """Drops the files' metadata pages from the resident memory once loading has read them
        (Qwen's tokenizer: ~15 MiB of the text file); a later metadata read maps them again."""
        lib.edgevlm_model_release_metadata(self.handle)

    def meta_str(self, which: int, key: str) -> str | None:
        raw = self.meta_bytes(which, key)
        return None if raw is None else raw.decode("utf-8", "replace")

    def meta_bytes(self, which: int, key: str) -> bytes | None:
        """A string value's bytes as stored (no decoding: the 17.5 MB tokenizer JSON of a
        Qwen model goes to the tokenizers library as they are)."""
        n = lib.edgevlm_model_meta_str(self.handle, which, key.encode(), ffi.NULL, 0)
        if n < 0:
            return None
        buf = _new_uncleared("char[]", n + 1)   # C fills it; zeroing 17.5 MB first is waste
        lib.edgevlm_model_meta_str(self.handle, which, key.encode(), buf, n + 1)
        raw: bytes = ffi.buffer(buf, n)[:]
        return raw

    def meta_str_array(self, which: int, key: str) -> list[str] | None:
        count = lib.edgevlm_model_meta_arr_len(self.handle, which, key.encode())
        if count < 0:
            return None
        out: list[str] = []
        buf = ffi.new("char[]", 4096)
        for i in range(count):
            n = lib.edgevlm_model_meta_arr_str(self.handle, which, key.encode(), i, buf, 4096)
            if n < 0:
                return None
            if n >= 4096:
                big = ffi.new("char[]", n + 1)
                lib.edgevlm_model_meta_arr_str(self.handle, which, key.encode(), i, big, n + 1)
                out.append(bytes(ffi.buffer(big, n)).decode("utf-8", "replace"))
            else:
                out.append(bytes(ffi.buffer(buf, n)).decode("utf-8", "replace"))
        return out

    def meta_ints(self, which: int, key: str, limit: int = 1 << 22) -> list[int] | None:
        n = lib.edgevlm_model_meta_ints(self.handle, which, key.encode(), ffi.NULL, 0)
        if n < 0:
            return None
        n = min(n, limit)
        buf = ffi.new("int64_t[]", max(n, 1))
        lib.edgevlm_model_meta_ints(self.handle, which, key.encode(), buf, n)
        return [int(buf[i]) for i in range(n)]

    def meta_int(self, which: int, key: str) -> int | None:
        values = self.meta_ints(which, key, 1)
        return values[0] if values else None

    def meta_float(self, which: int, key: str) -> float | None:
        out = ffi.new("double *")
        found = lib.edgevlm_model_meta_f64(self.handle, which, key.encode(), out)
        return float(out[0]) if found else None


def load_tokenizer(model: NativeModel) -> HFTokenizer:
    """The HF tokenizer JSON stored by ``edgevlm convert``, or one rebuilt from llama.cpp's
    ``tokenizer.ggml.*`` arrays."""
    hf_json = model.meta_bytes(TEXT, "tokenizer.huggingface.json")
    if hf_json:
        return HFTokenizer.from_json(hf_json, name=f"{model.files.text.name} (HF JSON)")
    from ..tokenizer_gguf import tokenizer_from_ggml

    tokens = model.meta_str_array(TEXT, "tokenizer.ggml.tokens")
    merges = model.meta_str_array(TEXT, "tokenizer.ggml.merges")
    types = model.meta_ints(TEXT, "tokenizer.ggml.token_type")
    pre = model.meta_str(TEXT, "tokenizer.ggml.pre") or "qwen2"
    if not tokens or merges is None or types is None:
        raise ValueError(f"{model.files.text}: no tokenizer in the file (neither "
                         "tokenizer.huggingface.json nor tokenizer.ggml.tokens/merges)")
    return HFTokenizer(tokenizer_from_ggml(tokens, merges, types, pre),
                       name=f"{model.files.text.name} (ggml vocab)")


def architecture(model: NativeModel) -> ModelFamily:
    """The model's family by its GGUF ``general.architecture`` (:mod:`.families`)."""
    return family_for(model.meta_str(TEXT, "general.architecture") or "")


def special_tokens(model: NativeModel, tok: HFTokenizer) -> SpecialTokens:
    markers = architecture(model).markers

    def find(key: str, text: str) -> int:
        value = model.meta_int(TEXT, key)
        if value is None:
            value = tok.token_id(text)
        if value is None:
            raise ValueError(f"{model.files.text}: the tokenizer has no {text} token")
        return value

    eos = {i for i in (model.meta_int(TEXT, "tokenizer.ggml.eos_token_id"),
                       *(tok.token_id(text) for text in architecture(model).eos_texts),
                       *(model.meta_ints(TEXT, "edgevlm.eos_token_ids") or []))
           if i is not None}
    return SpecialTokens(
        image_pad=find("edgevlm.image_token_id", markers["image_pad"]),
        video_pad=find("edgevlm.video_token_id", markers["video_pad"]),
        vision_start=find("edgevlm.vision_start_token_id", markers["vision_start"]),
        vision_end=find("edgevlm.vision_end_token_id", markers["vision_end"]),
        eos=frozenset(eos))


def model_family(model: NativeModel) -> Family:
    """The family's preprocessing rules with this checkpoint's values: patch and merge sizes
    from the mmproj file, and the pixel bounds its preprocessor configs asked for (stored by
    ``edgevlm convert`` as ``edgevlm.vision.*`` / ``edgevlm.video.*``; the family defaults
    otherwise)."""
    base = get_family(architecture(model).sizing)
    if not model.info["has_vision"]:
        return base

    def meta(key: str, default: int | None) -> int | None:
        value = model.meta_int(VISION, key)
        return value if value is not None else default

    return replace(
        base, patch_size=int(model.info["v_patch_size"]), merge_size=int(model.info["v_merge"]),
        temporal_patch_size=int(model.info["v_temporal_patch"]),
        min_pixels=meta("edgevlm.vision.min_pixels", base.min_pixels) or base.min_pixels,
        max_pixels=meta("edgevlm.vision.max_pixels", base.max_pixels) or base.max_pixels,
        video_min_pixels=meta("edgevlm.video.min_pixels", base.video_min_pixels),
        video_max_pixels=meta("edgevlm.video.max_pixels", base.video_max_pixels))


def fingerprint(model: NativeModel) -> str:
    """A stable id of the weights: ``edgevlm.fingerprint`` when stored, else a hash of the
    files' sizes and first/last MiB (cheap; enough to keep cache entries of different models
    apart)."""
    stored = model.meta_str(TEXT, "edgevlm.fingerprint")
    if stored:
        return stored
    h = hashlib.blake2b(digest_size=16)
    for path in (model.files.text, model.files.mmproj):
        if path is None:
            continue
        size = path.stat().st_size
        h.update(json.dumps([path.name, size]).encode())
        with path.open("rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read(1 << 20))
    return h.hexdigest()
