"""``Engine``: load a Qwen3-VL GGUF pair and answer chat messages with images and video.

The daemon's pipeline hands it prepared media and a tokenized chat
(:meth:`Engine.generate_prepared`); the Python API's :meth:`Engine.generate` prepares them
itself from the same lower layers (protocol parsing in ``wire``, media preparation in
``vision.prepare``), so both run the same path: prepared media (cache / decode / patchify) ->
ViT for cache misses -> prompt assembly -> prefill -> sampled decode with stop rules
(:mod:`.decode`). Nothing here imports the pipeline or a front door.
"""

from __future__ import annotations

import base64
import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from ..core.heap import return_freed_memory
from ..structured import Grammar, TokenConstraint, compile_grammar, parsed
from ..tokenizer import IM_END, ChatTokens, tokenize_chat
from ..vision.decode import MediaPolicy, decode_for_resize
from ..vision.prepare import FeatureCache, ModelFacts, Preparation, PreparedMedia, prepare_media
from ..vision.preprocess import PixelInput, image_planes, planes_to_pixels
from ..vision.sizing import media_bounds, pixel_bounds, resize_rule
from ..wire.context import check_context
from ..wire.features import VisionFeatures
from ..wire.protocol import Request, parse_request
from . import choices
from .decode import GenerationResult, Sampling, decode
from .model import (
    ModelFiles,
    NativeModel,
    architecture,
    find_model_files,
    fingerprint,
    load_tokenizer,
    model_family,
    special_tokens,
)
from .prompt import PromptInputs, PromptMedia
from .quantisation import auto_precision
from .session import NativeSession
from .stopping import StopChecker

__all__ = ["Engine", "GenerationResult", "Sampling"]

log = logging.getLogger(__name__)


def _media_part(kind: str, value: Any) -> dict[str, Any]:
    """A friendly image value (path, bytes, PIL image, data URL) as a protocol part."""
    if isinstance(value, str) and value.startswith("data:"):
        return {"type": kind, kind: value}
    if isinstance(value, Image.Image):
        buf = io.BytesIO()
        value.save(buf, "PNG")
        data = buf.getvalue()
    elif isinstance(value, bytes | bytearray):
        data = bytes(value)
    else:
        data = Path(value).read_bytes()
    return {"type": kind, kind: {"b64": base64.b64encode(data).decode()}}


def _normalise_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") == "image" and not isinstance(part.get("image"), dict):
                    parts.append(_media_part("image", part["image"]))
                elif part.get("type") == "video_frames":
                    frames = [_media_part("image", f)["image"] for f in part["video_frames"]]
                    parts.append({**part, "video_frames": frames})
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return out


# Arithmetic of the many-token products (prefill, the vision tower) -> the kernel mode.
# exact: within ~1e-5 of float32 (Engine's default); fast: activations rounded as llama.cpp
# does (Q8_0 for Q8_0/Q4_0 weights, bf16 for BF16, int8 blocks for the K-quants/IQ4) where the
# CPU makes that faster (AVX-512; ARM dot-product for Q8_0/Q4_0), ~1.5-2x the prefill speed
# there; decode differs only for F16/BF16 weights on AVX-512 (fast: f16/bf16 activations, as
# llama.cpp's decode). Precision name -> the session's kernel mode.
PRECISIONS = {"exact": "best", "fast": "fast"}
# auto (the daemon's and `edgevlm run`'s default): fast for K-quant/IQ4 weights, else exact
PRECISION_NAMES = ("auto", *PRECISIONS)


def _prefault_files(model: NativeModel) -> None:
    """The text file's pages, then the mmproj file's (C calls that cannot raise)."""
    model.prefault(0)
    model.prefault(1)


class Engine:
    """A loaded model and one inference session (calls are serialised)."""

    def __init__(self, files: ModelFiles, threads: int = 4, context: int = 4096,
                 kv_type: str = "f32", batch: int = 256, max_pixels: int | None = 1_003_520,
                 cache: FeatureCache | None = None,
                 progress: Callable[[str], None] | None = None,
                 precision: str = "exact", min_pixels: int | None = None,
                 family: str | None = None) -> None:
        if precision not in PRECISION_NAMES:
            raise ValueError(f"unknown precision {precision!r}; use one of "
                             f"{', '.join(PRECISION_NAMES)}")
        t0 = time.perf_counter()
        self.model = NativeModel(files)
        self.files = files
        self.name = files.name
        # The weights' pages are mapped by a C call on another thread (it holds the model),
        # the text file's first, while this one builds the tokenizer (~0.4 s for Qwen's
        # vocabulary) and the first answer runs: with the files in the page cache the answer
        # finds them mapped; with the files on disk it follows the read instead of waiting
        # for all of it (and a text answer never waits for the vision tower's pages).
        threading.Thread(target=_prefault_files, args=(self.model,), name="edgevlm-prefault",
                         daemon=True).start()
        self.tokenizer = load_tokenizer(self.model)
        self.architecture = architecture(self.model)  # engine.families: by the GGUF file
        self.special = special_tokens(self.model, self.tokenizer)
        self.family = model_family(self.model)
        if family is not None and family != self.family.name:
            raise ValueError(f"model.family is {family!r} but {self.name} is a "
                             f"{self.family.name} model; remove model.family (the model file "
                             "decides) or point model.path at a model of that family")
        self.max_pixels = max_pixels  # the deployment cap (None: the model's own bounds)
        self.min_pixels = min_pixels  # the deployment's default floor (None: the model's)
        info = self.model.info
        max_patches = 0
        if info["has_vision"]:
            biggest = pixel_bounds(self.family, max_pixels, None, None)[1]
            if self.family.video_max_pixels:  # a clip's budget covers >= 2 frames; one
                video = pixel_bounds(self.family, max_pixels, None, None, video=True)[1]
                biggest = max(biggest, video // 2)  # group of 2 frames is encoded at a time
            patch = self.family.patch_size
            max_patches = (-(-biggest // (patch * patch)) + 3) // 4 * 4
        self.session = NativeSession(self.model, context, threads, batch, kv_type, max_patches)
        self.precision = auto_precision(self.model) if precision == "auto" else precision
        self.session.use_kernels(PRECISIONS[self.precision])
        self.context = context
        self.facts = ModelFacts(
            fingerprint=fingerprint(self.model), hidden_size=int(info["n_embd"]),
            deepstack_layers=int(info["n_deepstack"]),
            image_mean=tuple(info["v_image_mean"]) if info["has_vision"] else (0.5, 0.5, 0.5),
            image_std=tuple(info["v_image_std"]) if info["has_vision"] else (0.5, 0.5, 0.5))
        self.sampling = self._sampling_defaults()
        self.cache = cache
        self._lock = threading.Lock()
        self._cancel = threading.Event()  # cancel(): the running answer stops at its next token
        return_freed_memory()  # the tokenizer's build leftovers (~7 MiB for Qwen's)
        self.model.release_metadata()  # the tokenizer's pages in the file (~15 MiB), read
        self.load_ms = (time.perf_counter() - t0) * 1e3
        if progress:
            progress(f"loaded {self.name} in {self.load_ms:.0f} ms")

    @classmethod
    def load(cls, path: str | Path, threads: int = 4, context: int = 4096, **kwargs: Any
             ) -> Engine:
        """Load ``DIR`` (model.gguf + mmproj.gguf) or a text .gguf with a sibling mmproj."""
        return cls(find_model_files(path), threads=threads, context=context, **kwargs)

    def _sampling_defaults(self) -> Sampling:
        """The model file's sampling values (``general.sampling.*``), else greedy."""
        temp = self.model.meta_float(0, "general.sampling.temp")
        top_k = self.model.meta_int(0, "general.sampling.top_k")
        top_p = self.model.meta_float(0, "general.sampling.top_p")
        return Sampling(temperature=temp if temp is not None else 0.0,
                                top_k=top_k if top_k is not None else 0,
                                top_p=top_p if top_p is not None else 1.0)

    # ------------------------------------------------------------------ vision

    def encode_pixels(self, pixels: PixelInput) -> VisionFeatures:
        with self._lock:
            return self.session.encode_vision(pixels)[0]

    def encode_image(self, image: Image.Image | bytes | str | Path,
                     max_pixels: int | None = None) -> VisionFeatures:
        """Vision rows + DeepStack rows + grid of one image (for the cache or vision_tokens)."""
        lo, hi = pixel_bounds(self.family, max_pixels or self.max_pixels, self.min_pixels, None)
        size = None  # the full picture's size when a JPEG was decoded reduced
        if not isinstance(image, Image.Image):
            data = image if isinstance(image, bytes) else Path(image).read_bytes()
            image, size = decode_for_resize(data, MediaPolicy(),
                                            resize_rule(self.family.factor, lo, hi))
        planes = image_planes(image.convert("RGB"), self.family, lo, hi, source_size=size)
        del image  # the float32 patches below are 8x the planes: do not hold both pictures
        return self.encode_pixels(planes_to_pixels(planes, self.family, self.facts.image_mean,
                                                   self.facts.image_std))

    # ------------------------------------------------------------------ generation

    def generate(self, messages: Sequence[dict[str, Any]], max_tokens: int = 128,
                 **params: Any) -> GenerationResult:
        """Answer chat messages; image values may be paths, bytes, PIL images or data URLs."""
        request = parse_request({"messages": _normalise_messages(messages),
                                 "max_tokens": max_tokens,
                                 **{k: v for k, v in params.items()
                                    if k not in ("on_text", "want_logits")}})
        t0 = time.perf_counter()
        kwargs = request.mm_processor_kwargs
        bounds = media_bounds(self.family, max_pixels=self.max_pixels,
                              min_pixels=self.min_pixels,
                              request_min=kwargs.min_pixels if kwargs else None,
                              request_max=kwargs.max_pixels if kwargs else None)
        prepared = prepare_media(request, Preparation(self.facts, self.family, bounds,
                                                      MediaPolicy(), self.cache))
        media_ms = (time.perf_counter() - t0) * 1e3
        return self.generate_prepared(request, prepared, media_ms=media_ms,
                                      on_text=params.get("on_text"),
                                      want_logits=bool(params.get("want_logits")))

    def cancel(self) -> None:
        """Stop the running answer (``finish_reason: cancelled``); any thread."""
        self._cancel.set()
        self.session.cancel()

    def generate_prepared(self, request: Request, prepared: Sequence[PreparedMedia],
                          media_ms: float = 0.0, on_text: Callable[[str], None] | None = None,
                          want_logits: bool = False, *, chat: ChatTokens | None = None,
                          checked: bool = False, grammar: Grammar | None = None
                          ) -> GenerationResult:
        """Answer ``request`` with its prepared media. ``chat``: its chat template already
        tokenized (admission's); ``checked``: the context check already ran (admission's
        budget); otherwise it runs here, on the assembled prompt, before the prefill.
        ``grammar``: the answer follows it (admission compiled the request's schema or
        regex; None: compiled here when the request has one)."""
        t_start = time.perf_counter()
        if chat is None:
            chat = tokenize_chat(self.architecture.chat_template(request.messages, True),
                                 self.tokenizer)
        if grammar is None:
            grammar = compile_grammar(request.schema_, request.regex)
        constraint = (TokenConstraint(grammar, self.tokenizer.backend, self.special.eos)
                      if grammar is not None else None)
        with self._lock:
            self._cancel.clear()
            media, encode_ms = self.encode_prepared(prepared)
            prompt = self.prompt_for(chat, media)
            if not checked:
                check_context(len(prompt.tokens) - prompt.n_vision, prompt.n_vision,
                              request.max_tokens, self.session.n_ctx,
                              ", ".join(f"{p.path} {m.features.n_tokens}"
                                        for p, m in zip(prepared, media, strict=True))
                              or "none")
            if request.choices is not None:
                return self._choose(request, prompt, media, prepared, t_start, media_ms,
                                    encode_ms)
            done = decode(self.session, prompt, self._sampling(request), request.max_tokens,
                          self.stop_checker(request.stop), on_text, want_logits,
                          self._cancel.is_set, constraint)
        n_out = done.n_sampled
        total_ms = (done.decode_end_at - t_start) * 1e3 + media_ms
        ttft_ms = (done.first_token_at - t_start) * 1e3 + media_ms if n_out else 0.0
        tpot_ms = ((done.decode_end_at - done.first_token_at) * 1e3 / max(n_out - 1, 1)
                   if n_out > 1 else 0.0)
        return GenerationResult(
            text=done.stopper.text, tokens=list(done.stopper.tokens),
            finish_reason=done.finish_reason, prompt_tokens=len(prompt.tokens),
            vision_tokens=prompt.n_vision,
            metrics={"media_ms": media_ms, "encode_ms": encode_ms,
                     "prefill_ms": done.prefill_ms, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms,
                     "total_ms": total_ms, "completion_tokens": float(n_out)},
            deepstack=all(m.features.has_deepstack for m in media) if media else True,
            cache=[(p.cache_hit, p.cache_key) for p in prepared if p.cache_key],
            logits=done.logits, parsed=parsed(grammar, done.stopper.text))

    def _choose(self, request: Request, prompt: PromptInputs, media: Sequence[PromptMedia],
                prepared: Sequence[PreparedMedia], t_start: float, media_ms: float,
                encode_ms: float) -> GenerationResult:
        """The most probable of ``request.choices`` (:mod:`.choices`); the lock is held."""
        assert request.choices is not None
        self.session.reset()
        t_prefill = time.perf_counter()
        first = self.session.prefill(prompt)[0]
        prefill_ms = (time.perf_counter() - t_prefill) * 1e3
        candidates = [(c, self.tokenizer.encode_text(c)) for c in request.choices]
        scored = choices.score(self.session, prompt, first, candidates,
                               self.tokenizer.control_id(IM_END))
        total_ms = (time.perf_counter() - t_start) * 1e3 + media_ms
        best = scored[0]
        return GenerationResult(
            text=best.text, tokens=list(best.tokens), finish_reason="stop",
            prompt_tokens=len(prompt.tokens), vision_tokens=prompt.n_vision,
            metrics={"media_ms": media_ms, "encode_ms": encode_ms, "prefill_ms": prefill_ms,
                     "ttft_ms": total_ms, "tpot_ms": 0.0, "total_ms": total_ms,
                     "completion_tokens": float(len(best.tokens))},
            deepstack=all(m.features.has_deepstack for m in media) if media else True,
            cache=[(p.cache_hit, p.cache_key) for p in prepared if p.cache_key],
            choices=scored)

    def _sampling(self, request: Request) -> Sampling:
        d = self.sampling

        def pick(value: Any, default: Any) -> Any:
            return value if value is not None else default

        return Sampling(pick(request.temperature, d.temperature), pick(request.top_k, d.top_k),
                        pick(request.top_p, d.top_p),
                        pick(request.repetition_penalty, d.repetition_penalty), request.seed)

    def encode_prepared(self, prepared: Sequence[PreparedMedia]) -> tuple[list[PromptMedia],
                                                                            float]:
        """Features of every media item: cached ones as they are, the rest through the ViT
        (and into the cache). Returns (media, encode_ms). Call with the lock held."""
        media: list[PromptMedia] = []
        encode_ms = 0.0
        for item in prepared:
            features = item.features
            if features is None:
                assert item.pixels is not None
                t0 = time.perf_counter()
                features = self.session.encode_vision(item.pixels)[0]
                encode_ms += (time.perf_counter() - t0) * 1e3
                if self.cache is not None and item.cache_key:
                    self.cache.put(item.cache_key, features, item.source_size)
            media.append(PromptMedia(features, item.kind == "video", item.timestamps))
        return media, encode_ms

    def prompt_for(self, chat: ChatTokens, media: Sequence[PromptMedia]) -> PromptInputs:
        """The prompt of a tokenized chat with its media's features, laid out by the family."""
        prompt: PromptInputs = self.architecture.assemble_prompt(
            chat, media, self.tokenizer, self.special, self.session.n_deepstack)
        return prompt

    def stop_checker(self, stop: Sequence[str]) -> StopChecker:
        return StopChecker(self.tokenizer, self.special.eos, stop)
