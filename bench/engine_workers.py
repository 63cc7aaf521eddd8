#!/usr/bin/env python3
"""The engine bench's worker process: loads one engine on one model and answers requests.

    python bench/engine_workers.py --gguf-dir DIR --threads N --ctx N --batch N
        --worker edgevlm|edgevlm-exact|edgevlm-fast|llamacpp|llama-bench|llama-mtmd|transformers
        [--llama-bin DIR]

Started by :class:`engine_driver.WorkerProc` (edgevlm and transformers with the project's
python, llama.cpp with the bench venv's). It answers one JSON request per line on stdin with
one JSON line on a private copy of stdout (fd 1 itself is pointed at stderr, so whatever the
native code prints cannot corrupt the protocol). Requests: ``{"op": OP}`` with OP one of
``ppN`` / ``tgN`` / ``vitS`` (timed prefill, decode, vision encode), ``ttft`` / ``ttft_hit``
(a whole image + question request up to its first token; ``ttft_hit`` edgevlm only),
``camera`` / ``cameraN`` (edgevlm: the camera stage's snapshot + prompt -> 40 tokens, at the
daemon's pixel budget or with ``max_pixels`` N), ``mem`` and ``quit``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine_common import (
    PRECISION,
    TTFT_QUESTION,
    chat_prompt,
    random_image,
    random_tokens,
    rss_kib,
    ttft_image_jpeg,
)
from engine_llama_bench import LlamaBenchWorker
from engine_llama_mtmd import LlamaMtmdWorker


class _Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._tokens: dict[int, list[int]] = {}

    def tokens(self, n: int) -> list[int]:
        if n not in self._tokens:
            self._tokens[n] = random_tokens(n)
        return self._tokens[n]

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req["op"]
        if op == "mem":
            return rss_kib()
        if op.startswith("pp"):
            return self._timed(lambda: self.prefill(self.tokens(int(op[2:]))), int(op[2:]))
        if op.startswith("tg"):
            return self._timed(lambda: self.decode(self.tokens(int(op[2:]))), int(op[2:]))
        if op.startswith("vit"):
            n_tokens = self.prepare_image(int(op[3:]))
            res = self._timed(lambda: self.encode_image(int(op[3:])), 0)
            res["image_tokens"] = n_tokens
            return res
        if op in ("ttft", "ttft_hit"):
            return self.ttft(hit=op == "ttft_hit")
        if op.startswith("camera"):
            return self.camera(op)
        raise ValueError(f"unknown op {op!r}")

    def ttft(self, hit: bool) -> dict[str, Any]:
        raise ValueError(f"{type(self).__name__} has no time-to-first-token path")

    def answer(self, user_text: str, max_tokens: int) -> dict[str, Any]:
        raise ValueError(f"{type(self).__name__} has no chat path")

    def camera(self, op: str) -> dict[str, Any]:
        raise ValueError(f"{type(self).__name__} has no camera path (llama.cpp's is "
                         "llama-mtmd-cli, run by stage_camera.py)")

    @staticmethod
    def _timed(fn: Any, n: int) -> dict[str, Any]:
        cpu0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out = {"ms": wall * 1e3, "cpu_ms": cpu * 1e3}
        if n:
            out["tok_s"] = n / wall
        return out

    # subclasses: info(), prefill(tokens), decode(tokens), prepare_image(size), encode_image(size)
    # and, for the TTFT and cold-start stages, ttft(hit) and answer(user_text, max_tokens)


class _EdgevlmWorker(_Worker):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import numpy as np

        from edgevlm.core.native import ffi, lib
        from edgevlm.engine import Engine

        self.np = np
        t0 = time.perf_counter()
        # the engine stage names the worker, the cold-start script the engine
        name = getattr(args, "worker", None) or getattr(args, "engine", "edgevlm")
        self.engine = Engine.load(args.gguf_dir, threads=args.threads, context=args.ctx,
                                  batch=args.batch, precision=PRECISION.get(name, "auto"))
        self.precision = self.engine.precision   # auto resolved: "exact" or "fast"
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.session = self.engine.session
        self.logits = np.empty(self.session.n_vocab, dtype=np.float32)
        self.pixels: dict[int, Any] = {}
        self.build = ffi.string(lib.edgevlm_build_info()).decode()
        self._ttft_messages: list[dict[str, Any]] | None = None
        self.encode_calls = 0

    def info(self) -> dict[str, Any]:
        import edgevlm

        return {"engine": "edgevlm", "version": getattr(edgevlm, "__version__", "?"),
                "build": self.build, "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": {"threads": self.args.threads, "n_ctx": self.args.ctx,
                             "n_batch": self.args.batch, "kv": "f32 (Engine default)",
                             "precision": self.precision,
                             "max_patches": self.session.max_patches}}

    def prefill(self, tokens: list[int]) -> None:
        from edgevlm.engine.prompt import PromptInputs

        np = self.np
        n = len(tokens)
        pos = np.ascontiguousarray(np.broadcast_to(np.arange(n, dtype=np.int32), (3, n)))
        prompt = PromptInputs(np.asarray(tokens, dtype=np.int32), pos,
                              np.full(n, -1, dtype=np.int32),
                              np.zeros((0, self.session.n_embd), dtype=np.float32), None, 0, 0)
        self.session.reset()
        self.session.prefill(prompt, 1)

    def decode(self, tokens: list[int]) -> None:
        self.session.reset()
        for i, tok in enumerate(tokens):
            self.session.decode(tok, i, self.logits)

    def prepare_image(self, size: int) -> int:
        if size not in self.pixels:
            from PIL import Image

            from edgevlm.vision.preprocess import preprocess_image
            from edgevlm.vision.sizing import pixel_bounds

            eng = self.engine
            lo, hi = pixel_bounds(eng.family, eng.max_pixels, None, None)
            self.pixels[size] = preprocess_image(
                Image.fromarray(random_image(size)), eng.family, lo, hi,
                eng.facts.image_mean, eng.facts.image_std)
        gt, gh, gw = self.pixels[size].grid_thw
        return int(gt * gh * gw // 4)

    def encode_image(self, size: int) -> None:
        self.session.encode_vision(self.pixels[size])

    def _ttft_setup(self) -> list[dict[str, Any]]:
        """The request's messages (the image as base64, as it arrives at the daemon), a
        vision cache on the engine (as ``service.load_engine`` sets one) and a counter of the
        vision encoder's calls, so a cache hit is checked to skip it."""
        if self._ttft_messages is None:
            from edgevlm.pipeline.cache import VisionCache

            self.engine.cache = VisionCache(256 * 2**20)
            encode = self.session.encode_vision

            def counted(*a: Any, **kw: Any) -> Any:
                self.encode_calls += 1
                return encode(*a, **kw)

            self.session.encode_vision = counted  # type: ignore[method-assign]
            b64 = base64.b64encode(ttft_image_jpeg()).decode()
            self._ttft_messages = [{"role": "user", "content": [
                {"type": "image", "image": {"b64": b64}},
                {"type": "text", "text": TTFT_QUESTION}]}]
        return self._ttft_messages

    def answer(self, user_text: str, max_tokens: int) -> dict[str, Any]:
        """A greedy chat answer through ``Engine.generate``; the KV cache's shape for sizing."""
        result = self.engine.generate([{"role": "user", "content": user_text}],
                                      max_tokens=max_tokens, temperature=0.0)
        info = self.engine.model.info
        return {"prompt_tokens": result.prompt_tokens, "answer_tokens": len(result.tokens),
                "kv": {"n_layer": info["n_layer"], "n_head_kv": info["n_head_kv"],
                       "head_dim": info["head_dim"], "n_ctx": self.session.n_ctx,
                       "bytes_per_value": 4}}  # Engine's default KV type is f32

    def ttft(self, hit: bool) -> dict[str, Any]:
        """Image + question -> first token through ``Engine.generate`` (admission, base64 and
        JPEG decode, preprocessing, cache lookup, ViT, prompt, prefill, sampling). A miss
        clears the cache first; a hit must find the image cached and not run the encoder."""
        messages = self._ttft_setup()
        cache = self.engine.cache
        assert cache is not None
        if not hit:
            cache.clear()
        calls0 = self.encode_calls
        cpu0, t0 = time.process_time(), time.perf_counter()
        result = self.engine.generate(messages, max_tokens=1, temperature=0.0)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        calls = self.encode_calls - calls0
        cache_hit = bool(result.cache and result.cache[0][0])
        if hit and (calls or not cache_hit):
            raise RuntimeError(f"a repeated image was not served from the cache "
                               f"(hit={cache_hit}, encoder calls={calls})")
        if not hit and (calls != 1 or cache_hit):
            raise RuntimeError(f"a new image did not run the encoder once (hit={cache_hit}, "
                               f"encoder calls={calls})")
        m = result.metrics
        return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3, "engine_ttft_ms": m["ttft_ms"],
                "media_ms": m["media_ms"], "encode_ms": m["encode_ms"],
                "prefill_ms": m["prefill_ms"], "prompt_tokens": result.prompt_tokens,
                "image_tokens": result.vision_tokens, "encoder_calls": calls,
                "cache_hit": cache_hit, "cache_hits_total": cache.stats().hits,
                "question_tokens": len(self.engine.tokenizer.encode(TTFT_QUESTION))}

    def camera(self, op: str) -> dict[str, Any]:
        """The camera stage's request through ``Engine.generate``: the snapshot as base64
        (as a camera frame reaches the engine), the daemon's camera prompt, greedy, exactly
        ``ANSWER_TOKENS`` tokens (the stop checker is given no EOS ids for this call), no
        vision cache; ``cameraN``: ``mm_processor_kwargs.max_pixels`` N (a per-camera pixel
        budget). Decode = first sampled token -> last (``ANSWER_TOKENS - 1`` steps)."""
        from stage_camera import (
            ANSWER_TOKENS,
            SNAPSHOT_SIZE,
            camera_prompt,
            max_pixels_of,
            snapshot_jpeg,
        )

        from edgevlm.engine.stopping import StopChecker
        from edgevlm.vision.sizing import image_tokens, pixel_bounds

        eng = self.engine
        px = max_pixels_of(op)
        messages = [{"role": "user", "content": [
            {"type": "image", "image": {"b64": base64.b64encode(snapshot_jpeg()).decode()}},
            {"type": "text", "text": camera_prompt()}]}]
        extra = {"mm_processor_kwargs": {"max_pixels": px}} if px else {}
        saved_cache, eng.cache = eng.cache, None
        eng.stop_checker = lambda stop: StopChecker(  # type: ignore[method-assign]
            eng.tokenizer, frozenset(), stop)
        try:
            cpu0, t0 = time.process_time(), time.perf_counter()
            result = eng.generate(messages, max_tokens=ANSWER_TOKENS, temperature=0.0, **extra)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            del eng.stop_checker   # the class's method again
            eng.cache = saved_cache
        if len(result.tokens) != ANSWER_TOKENS or result.finish_reason != "length":
            raise RuntimeError(f"the camera answer has {len(result.tokens)} tokens "
                               f"({result.finish_reason}), expected {ANSWER_TOKENS}")
        lo, hi = pixel_bounds(eng.family, eng.max_pixels, eng.min_pixels, px)
        sized = image_tokens(*SNAPSHOT_SIZE, eng.family, lo, hi)
        m = result.metrics
        return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3, "engine_total_ms": m["total_ms"],
                "media_ms": m["media_ms"], "encode_ms": m["encode_ms"],
                "prefill_ms": m["prefill_ms"], "ttft_ms": m["ttft_ms"],
                "decode_ms": m["total_ms"] - m["ttft_ms"], "prompt_tokens": result.prompt_tokens,
                "image_tokens": result.vision_tokens, "answer_tokens": len(result.tokens),
                "max_pixels": hi, "resized": f"{sized.resized_width}×{sized.resized_height}"}


class _LlamaWorker(_Worker):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import ctypes

        import llama_cpp as llama
        from llama_cpp import mtmd_cpp as mtmd

        self.llama, self.mtmd, self.ctypes = llama, mtmd, ctypes
        d = Path(args.gguf_dir)
        t0 = time.perf_counter()
        llama.llama_backend_init()
        mp = llama.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama.llama_model_load_from_file(str(d / "model.gguf").encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {d / 'model.gguf'}")
        cp = llama.llama_context_default_params()
        cp.n_ctx = args.ctx
        cp.n_batch = args.batch
        cp.n_ubatch = args.batch
        cp.n_threads = args.threads
        cp.n_threads_batch = args.threads
        self.ctx = llama.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.cparams = {"n_ctx": llama.llama_n_ctx(self.ctx), "n_batch": args.batch,
                        "n_ubatch": args.batch, "threads": args.threads,
                        "flash_attn_type": int(cp.flash_attn_type),
                        "type_k": int(cp.type_k), "type_v": int(cp.type_v)}
        self.mem = llama.llama_get_memory(self.ctx)
        self.batch = llama.llama_batch_init(max(args.batch, 1), 0, 1)
        mparams = mtmd.mtmd_context_params_default()
        mparams.use_gpu = False
        mparams.n_threads = args.threads
        mparams.print_timings = False
        mparams.warmup = getattr(args, "mtmd_warmup", True)
        self.mctx = mtmd.mtmd_init_from_file(str(d / "mmproj.gguf").encode(), self.model, mparams)
        if not self.mctx:
            raise RuntimeError(f"mtmd could not load {d / 'mmproj.gguf'}")
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.chunks: dict[int, Any] = {}
        self._keep: list[Any] = []
        self._ttft_input: tuple[Any, Any] | None = None

    def info(self) -> dict[str, Any]:
        llama = self.llama
        return {"engine": "llama.cpp", "version": f"llama-cpp-python {llama.__version__}",
                "build": llama.llama_print_system_info().decode(errors="replace"),
                "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": self.cparams}

    def _run(self, tokens: list[int], start: int) -> None:
        llama, b = self.llama, self.batch
        n = len(tokens)
        b.n_tokens = n
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = i == n - 1
        rc = llama.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        llama.llama_synchronize(self.ctx)

    def prefill(self, tokens: list[int]) -> None:
        self.llama.llama_memory_clear(self.mem, True)
        for c0 in range(0, len(tokens), self.args.batch):
            self._run(tokens[c0:c0 + self.args.batch], c0)

    def decode(self, tokens: list[int]) -> None:
        self.llama.llama_memory_clear(self.mem, True)
        for i, tok in enumerate(tokens):
            self._run([tok], i)

    def prepare_image(self, size: int) -> int:
        mtmd, ctypes = self.mtmd, self.ctypes
        if size not in self.chunks:
            rgb = random_image(size).tobytes()
            buf = (ctypes.c_ubyte * len(rgb)).from_buffer_copy(rgb)
            bitmap = mtmd.mtmd_bitmap_init(size, size, buf)
            chunks = mtmd.mtmd_input_chunks_init()
            text = mtmd.mtmd_input_text()
            text.text = mtmd.mtmd_default_marker()
            text.text_len = len(text.text) if hasattr(text, "text_len") else 0
            text.add_special = False
            text.parse_special = True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self.mctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise RuntimeError(f"mtmd_tokenize returned {rc}")
            image_chunk = None
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    image_chunk = chunk
            if image_chunk is None:
                raise RuntimeError("mtmd_tokenize produced no image chunk")
            self._keep += [buf, bitmap, chunks, text, bitmaps]
            self.chunks[size] = image_chunk
        return int(mtmd.mtmd_input_chunk_get_n_tokens(self.chunks[size]))

    def encode_image(self, size: int) -> None:
        rc = self.mtmd.mtmd_encode_chunk(self.mctx, self.chunks[size])
        if rc != 0:
            raise RuntimeError(f"mtmd_encode_chunk returned {rc}")

    def answer(self, user_text: str, max_tokens: int) -> dict[str, Any]:
        """A greedy answer to the chat-templated text: ``llama_tokenize``, one
        ``llama_decode`` of the prompt, then a step per token (as llama-simple does)."""
        llama = self.llama
        text = chat_prompt(user_text).encode()
        vocab = llama.llama_model_get_vocab(self.model)
        ids = (llama.llama_token * (len(text) + 8))()
        n = llama.llama_tokenize(vocab, text, len(text), ids, len(ids), False, True)
        if n < 0:
            raise RuntimeError(f"llama_tokenize returned {n}")
        sampler = llama.llama_sampler_init_greedy()
        llama.llama_memory_clear(self.mem, True)
        batch, out = llama.llama_batch_get_one(ids, n), []
        try:
            for _ in range(max_tokens):
                rc = llama.llama_decode(self.ctx, batch)
                if rc != 0:
                    raise RuntimeError(f"llama_decode returned {rc}")
                tok = llama.llama_sampler_sample(sampler, self.ctx, -1)
                out.append(int(tok))
                if llama.llama_vocab_is_eog(vocab, tok):
                    break
                one = (llama.llama_token * 1)(tok)  # alive until the next decode
                batch = llama.llama_batch_get_one(one, 1)
        finally:
            llama.llama_sampler_free(sampler)
        ggml_type_bytes = {0: 4, 1: 2}  # GGML_TYPE_F32, GGML_TYPE_F16 (its default)
        return {"prompt_tokens": n, "answer_tokens": len(out),
                "kv": {"n_ctx": int(llama.llama_n_ctx(self.ctx)),
                       "bytes_per_value": ggml_type_bytes.get(self.cparams["type_k"])}}

    def ttft(self, hit: bool) -> dict[str, Any]:
        """Image + question -> first token on llama.cpp's mtmd path, as its mtmd-cli does it:
        ``mtmd_helper_bitmap_init_from_buf`` (JPEG decode), ``mtmd_tokenize`` (preprocessing),
        ``mtmd_helper_eval_chunks`` (text, image encode, image embeddings, text; logits of the
        last token), then a greedy sample. llama.cpp has no vision cache."""
        if hit:
            raise ValueError("llama.cpp has no vision cache (ttft_hit is edgevlm's)")
        llama, mtmd, ctypes = self.llama, self.mtmd, self.ctypes
        if self._ttft_input is None:
            jpeg = ttft_image_jpeg()
            prompt = chat_prompt(TTFT_QUESTION, mtmd.mtmd_default_marker().decode()).encode()
            self._ttft_input = ((ctypes.c_uint8 * len(jpeg)).from_buffer_copy(jpeg), prompt)
            self._sampler = llama.llama_sampler_init_greedy()
        buf, prompt = self._ttft_input
        cpu0, t0 = time.process_time(), time.perf_counter()
        llama.llama_memory_clear(self.mem, True)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.mctx, buf, len(buf), False)
        if not bitmap:
            raise RuntimeError("mtmd_helper_bitmap_init_from_buf could not decode the JPEG")
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            text = mtmd.mtmd_input_text()
            text.text, text.text_len = prompt, len(prompt)
            text.add_special, text.parse_special = False, True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            rc = mtmd.mtmd_tokenize(self.mctx, chunks, ctypes.byref(text), bitmaps, 1)
            if rc != 0:
                raise RuntimeError(f"mtmd_tokenize returned {rc}")
            n_past = llama.llama_pos(0)
            rc = mtmd.mtmd_helper_eval_chunks(self.mctx, self.ctx, chunks, 0, 0,
                                              self.args.batch, True, ctypes.byref(n_past))
            if rc != 0:
                raise RuntimeError(f"mtmd_helper_eval_chunks returned {rc}")
            llama.llama_sampler_sample(self._sampler, self.ctx, -1)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            n_prompt = int(mtmd.mtmd_helper_get_n_tokens(chunks))
            n_image = sum(int(mtmd.mtmd_input_chunk_get_n_tokens(c)) for c in (
                mtmd.mtmd_input_chunks_get(chunks, i)
                for i in range(mtmd.mtmd_input_chunks_size(chunks)))
                if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)
        return {"ms": wall * 1e3, "cpu_ms": cpu * 1e3, "prompt_tokens": n_prompt,
                "image_tokens": n_image}


class _TransformersWorker(_Worker):
    """transformers on the bf16 safetensors checkpoint (sdpa attention, ``torch`` threads =
    --threads): the text model with a ``DynamicCache`` + ``lm_head`` on the last position, and
    the vision tower on the same preprocessed pixels as edgevlm."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        torch.set_num_threads(args.threads)
        self.torch = torch
        t0 = time.perf_counter()
        self.model = Qwen3VLForConditionalGeneration.from_pretrained(
            args.gguf_dir, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
        self.load_ms = (time.perf_counter() - t0) * 1e3
        self.lm = self.model.model.language_model
        self.pixels: dict[int, Any] = {}

    def info(self) -> dict[str, Any]:
        import transformers

        return {"engine": "transformers", "version": f"transformers {transformers.__version__}",
                "build": f"torch {self.torch.__version__}, bf16, sdpa",
                "load_ms": self.load_ms, "python": sys.version.split()[0],
                "settings": {"threads": self.args.threads, "dtype": "bfloat16",
                             "attn": "sdpa", "weights": "safetensors checkpoint"}}

    def _forward(self, ids: list[int], cache: Any) -> Any:
        torch = self.torch
        x = torch.tensor([ids], dtype=torch.long)
        h = self.lm(input_ids=x, cache=cache, use_cache=True).last_hidden_state
        return self.model.lm_head(h[:, -1:])

    def prefill(self, tokens: list[int]) -> None:
        from transformers import DynamicCache

        with self.torch.inference_mode():
            self._forward(tokens, DynamicCache(config=self.lm.config))

    def decode(self, tokens: list[int]) -> None:
        from transformers import DynamicCache

        with self.torch.inference_mode():
            cache = DynamicCache(config=self.lm.config)
            for tok in tokens:
                self._forward([tok], cache)

    def prepare_image(self, size: int) -> int:
        if size not in self.pixels:
            from PIL import Image

            from edgevlm.vision.preprocess import preprocess_image
            from edgevlm.vision.sizing import get_family

            px = preprocess_image(Image.fromarray(random_image(size)), get_family("qwen3-vl"))
            self.pixels[size] = (
                self.torch.from_numpy(px.pixel_values).to(self.torch.bfloat16),
                self.torch.tensor([list(px.grid_thw)], dtype=self.torch.long))
        grid = self.pixels[size][1][0]
        return int(grid.prod()) // 4

    def encode_image(self, size: int) -> None:
        values, grid = self.pixels[size]
        with self.torch.inference_mode():
            self.model.model.visual(values, grid_thw=grid)


WORKERS = {"edgevlm": _EdgevlmWorker, "edgevlm-exact": _EdgevlmWorker,
           "edgevlm-fast": _EdgevlmWorker, "llamacpp": _LlamaWorker,
           "llama-bench": LlamaBenchWorker, "llama-mtmd": LlamaMtmdWorker,
           "transformers": _TransformersWorker}


def worker_main(args: argparse.Namespace) -> int:
    """Serve requests until ``quit`` or the end of stdin; errors are answered, not raised."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        worker: _Worker = WORKERS[args.worker](args)
        # a worker whose engine runs in child processes (llama-bench, llama-mtmd) reports
        # their memory
        hello = {"ok": True, "mem_after_load": rss_kib(), **worker.info()}  # type: ignore[attr-defined]
    except Exception as exc:  # reported to the parent, which decides
        proto.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    proto.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            proto.write(json.dumps({"ok": True, **worker.handle(req)}) + "\n")
        except Exception as exc:
            proto.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
                        + "\n")
    return 0



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", choices=tuple(WORKERS), required=True)
    ap.add_argument("--gguf-dir", required=True, type=Path)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--llama-bin", default="",
                    help="llama.cpp's tools (the llama-bench and llama-mtmd workers)")
    return worker_main(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
