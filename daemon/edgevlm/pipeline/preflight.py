"""Token-budget preflight: refuse a request that cannot fit before any pixel is decoded.

Image sizes come from the file headers (a lazy Pillow open of the first 64 KiB of the decoded
bytes), run through the family's ``smart_resize`` with the effective pixel bounds; video adds
its per-group timestamps and markers; ``vision_tokens`` cost their grid, once their structure
and byte counts are checked (:func:`~edgevlm.wire.vision_tokens.check_vision_tokens`, from the
base64
lengths: a malformed part is ``invalid_vision_tokens`` whatever the context); ``image_ref`` costs
what its cache entry holds; text is counted by the model's tokenizer on the chat-template
rendering. ``prompt_tokens + max_tokens > context`` is ``context_length_exceeded`` with every
number in the message.

Admission runs on the MQTT network thread, so the text is bounded by its length before it is
tokenized (issue 20, finding 2; :mod:`edgevlm.tokenizer` has the bounds):
``limits.max_text_bytes``
was checked already (:func:`~edgevlm.pipeline.limits.check_request_limits`); a text whose *lower*
bound
(bytes / the longest token's bytes) cannot fit is refused here without tokenizing; a text of at
most :data:`ADMISSION_TOKENIZE_BYTES` is tokenized exactly (a few ms); a longer one is admitted
on its *upper* bound (one token per byte) and the worker counts it exactly before any media
is decoded (:func:`count_long_text`; the same ``context_length_exceeded``, from the one check
:func:`edgevlm.wire.context.check_context`).

The budget keeps what it decided for the worker: the pixel bounds of the request's images and
clips, and the tokenized chat when it was counted here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..tokenizer import (
    ChatTemplate,
    ChatTokens,
    Control,
    IdTokenizer,
    Segment,
    TextTokenizer,
    count_chat,
    tokenize_chat,
    utf8_bounds,
)
from ..vision.decode import ImageHeader, MediaPolicy, probe_image
from ..vision.sizing import Family, MediaBounds, image_tokens, media_bounds, video_tokens
from ..wire import strict_base64
from ..wire.context import check_context
from ..wire.errors import CacheMiss, UnsupportedMedia, UnsupportedModality
from ..wire.protocol import (
    ImagePart,
    ImageRefPart,
    ImageUrlPart,
    InlineBytes,
    Request,
    VideoFramesPart,
    VisionTokensPart,
    media_base64_span,
)
from ..wire.vision_tokens import check_vision_tokens, checked_grid
from .limits import MMLimits, message_text_bytes

if TYPE_CHECKING:
    from ..engine import Engine

# Headers are probed from a prefix of the base64: 4 KiB first (a plain JPEG/PNG/WebP header),
# then 64 KiB (big EXIF blocks with thumbnails), then the whole file.
HEADER_PREFIXES = (5_464, 87_384)
HEADER_PREFIX_CHARS = HEADER_PREFIXES[-1]

# The most template-text bytes admission tokenizes on the network thread. Measured on a shared
# 2-core x86 (tests/unit/test_text_budget.py prints it): 4 KiB takes 2-5 ms for English and
# ~5-10 ms for random ASCII (the slowest text: 0.3-0.7 MB/s), the demo's vocabulary and
# Qwen's alike; camera prompts are far shorter.
ADMISSION_TOKENIZE_BYTES = 4096


@dataclass(frozen=True)
class BudgetItem:
    """The token cost of one media item."""

    path: str
    kind: str  # image | image_ref | vision_tokens | video
    tokens: int  # LLM tokens the item adds, markers and timestamps included
    detail: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Budget:
    """The prompt's token budget."""

    text_tokens: int
    vision_tokens: int
    prompt_tokens: int
    max_tokens: int
    context: int
    items: tuple[BudgetItem, ...]
    tokenizer: str
    # False: text_tokens (and prompt_tokens) are an upper bound, the text was too long to
    # tokenize at admission; the worker counts it (count_long_text)
    text_exact: bool = True
    # what the worker uses as decided here: the pixel bounds, the tokenized chat (None: not
    # tokenized here, a long text or a tokenizer without ids)
    bounds: MediaBounds | None = field(default=None, compare=False, repr=False)
    chat: ChatTokens | None = field(default=None, compare=False, repr=False)
    # max_tokens is a cap the answer is fitted to the context by (preflight's fit_max_tokens);
    # the worker fits it again on a long text's exact count
    fit_max_tokens: bool = field(default=False, compare=False)

    @property
    def items_text(self) -> str:
        """The items' tokens as the context message lists them."""
        return ", ".join(f"{i.path} {i.tokens}" for i in self.items) or "none"

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens, "text_tokens": self.text_tokens,
            "text_exact": self.text_exact,
            "vision_tokens": self.vision_tokens, "max_tokens": self.max_tokens,
            "context": self.context, "tokenizer": self.tokenizer,
            # "tokens" of an item: what it adds to the prompt, markers included
            "items": [{"path": i.path, "kind": i.kind, **i.detail, "tokens": i.tokens}
                      for i in self.items],
        }


@dataclass(frozen=True)
class PreflightContext:
    """What the preflight needs to know about the deployment and the model."""

    family: Family
    context_length: int
    tokenizer: TextTokenizer
    chat_template: ChatTemplate  # the model family's (edgevlm.engine.families)
    media: MediaPolicy = field(default_factory=MediaPolicy)
    mm: MMLimits = field(default_factory=MMLimits)
    max_pixels: int | None = None  # model.max_pixels: the deployment cap
    min_pixels: int | None = None  # model.min_pixels
    ref_tokens: Callable[[str], int | None] | None = None  # image_ref -> cached LLM tokens
    # The model's LLM hidden size and DeepStack layers: with both, a vision_tokens part's
    # DeepStack count and byte counts are checked here too; without, only its grid.
    hidden_size: int | None = None
    deepstack_layers: int | None = None


def header_of(source: str | InlineBytes | Any, policy: MediaPolicy, path: str) -> ImageHeader:
    """Image header of a media source, decoding only a prefix of its base64 when it can.

    The policy's format and pixel limits are checked here; errors name the part's path.
    """
    raw = source.raw if isinstance(source, InlineBytes) else None
    try:
        if raw is not None:  # bytes in hand (a camera frame): the header is at their start
            return probe_image(raw, policy)
        _, text, start = media_base64_span(source)
        for chars in HEADER_PREFIXES:
            if len(text) - start <= chars:
                break
            try:
                return probe_image(strict_base64.decode(text[start:start + chars]), policy)
            except (UnsupportedMedia, strict_base64.Base64Error):
                continue  # header beyond the prefix: try a longer one, then the whole file
        return probe_image(strict_base64.decode(text[start:]), policy)
    except strict_base64.Base64Error as exc:
        raise UnsupportedMedia(f"{path}: media base64 is invalid: {exc}") from None
    except UnsupportedMedia as exc:
        raise UnsupportedMedia(f"{path}: {exc.message}", code=exc.status_code) from None


def bounds_for(ctx: PreflightContext, request: Request) -> MediaBounds:
    """Effective (min, max) pixels of this request's images and clips."""
    kwargs = request.mm_processor_kwargs
    return media_bounds(ctx.family, max_pixels=ctx.max_pixels, min_pixels=ctx.min_pixels,
                        request_min=kwargs.min_pixels if kwargs else None,
                        request_max=kwargs.max_pixels if kwargs else None,
                        image_cap=_option_max(ctx.mm, "image"),
                        video_cap=_option_max(ctx.mm, "video"))


def _option_max(mm: MMLimits, modality: str) -> int | None:
    limit = mm.limit(modality)
    return limit.max_pixels if limit else None


def _media_item(path: str, part: Any, bounds: MediaBounds, ctx: PreflightContext
                ) -> BudgetItem:
    if isinstance(part, ImagePart | ImageUrlPart):
        source = part.image if isinstance(part, ImagePart) else part.image_url
        header = header_of(source, ctx.media, path)
        lo, hi = bounds.image
        sized = image_tokens(header.width, header.height, ctx.family, lo, hi)
        return BudgetItem(path, "image", sized.tokens_with_markers, MappingProxyType({
            "width": header.width, "height": header.height, **sized.to_json()}))
    if isinstance(part, VisionTokensPart):
        # structure first: a malformed part is invalid whatever the context
        if ctx.hidden_size is not None and ctx.deepstack_layers is not None:
            grid = check_vision_tokens(part.vision_tokens, ctx.hidden_size,
                                       ctx.deepstack_layers).grid
        else:
            grid = checked_grid(part.vision_tokens.grid)
        gt, gh, gw = grid
        n = gt * gh * gw
        return BudgetItem(path, "vision_tokens", n + 2, MappingProxyType({"grid": [gt, gh, gw]}))
    if isinstance(part, ImageRefPart):
        tokens = ctx.ref_tokens(part.image_ref) if ctx.ref_tokens else None
        if tokens is None:
            raise CacheMiss(f"{path}: image_ref {part.image_ref} is not in the vision cache "
                            "(evicted or never stored); send the image bytes again")
        return BudgetItem(path, "image_ref", tokens + 2, MappingProxyType({
            "image_ref": part.image_ref}))
    assert isinstance(part, VideoFramesPart)
    headers = [header_of(frame, ctx.media, f"{path}.video_frames.{k}")
               for k, frame in enumerate(part.video_frames)]
    first = headers[0]
    for k, h in enumerate(headers):
        if (h.width, h.height) != (first.width, first.height):
            raise UnsupportedMedia(f"{path}.video_frames.{k}: frame is {h.width}x{h.height}, "
                                   f"frame 0 is {first.width}x{first.height}; all frames of a "
                                   "video must have the same size")
    if bounds.video is None:
        raise UnsupportedModality(f"video is not supported by the {ctx.family.name} family; "
                                  "send the frames as images")
    lo, hi = bounds.video
    video = video_tokens(len(headers), first.width, first.height, part.fps, ctx.family, lo, hi)
    timestamp_tokens = sum(ctx.tokenizer.count(ts) for ts in video.timestamps)
    tokens = video.vision_tokens + video.marker_tokens + timestamp_tokens
    return BudgetItem(path, "video", tokens, MappingProxyType({
        "width": first.width, "height": first.height, "frames": video.num_frames,
        "resized_width": video.resized_width, "resized_height": video.resized_height,
        "grid": list(video.grid), "timestamps": list(video.timestamps)}))


@dataclass(frozen=True)
class TextSize:
    """The length of a request's template text (role lines, newlines, message text: the
    pieces :func:`~edgevlm.tokenizer.count_chat` tokenizes), measured without tokenizing."""

    message_bytes: int                    # UTF-8 bytes of the messages' text parts
    controls: int                         # the template's control tokens, one token each
    pieces: tuple[tuple[int, int], ...]   # per text piece: utf8_bounds (smaller, larger)

    @property
    def high_bytes(self) -> int:
        return sum(high for _, high in self.pieces)

    def lower_tokens(self, max_token_bytes: int | None) -> int:
        """Fewest tokens the text can be: no token covers more than ``max_token_bytes``."""
        if not max_token_bytes:
            return self.controls
        return self.controls + sum(-(-low // max_token_bytes) for low, _ in self.pieces)

    def upper_tokens(self) -> int:
        """Most tokens the text can be for a byte-level tokenizer: one per byte."""
        return self.controls + self.high_bytes


def text_size(request: Request, pieces: list[Segment]) -> TextSize:
    """The size of ``request``'s text as rendered by its chat template (``pieces``)."""
    return TextSize(message_text_bytes(request),
                    sum(1 for p in pieces if isinstance(p, Control)),
                    tuple(utf8_bounds(p) for p in pieces if isinstance(p, str)))


def fitted_max_tokens(requested: int, room: int) -> int:
    """A cap of ``requested`` tokens fitted to the ``room`` the prompt leaves in the context;
    unchanged when it fits, or when no room is left (the context check then refuses it)."""
    return room if 1 <= room < requested else requested


def count_long_text(request: Request, budget: Budget, tokenizer: IdTokenizer,
                    template: ChatTemplate) -> tuple[ChatTokens, int]:
    """The tokenized chat of a request admitted on its text's upper bound
    (``budget.text_exact`` False), checked against the context with the budget's vision
    tokens, and the answer's max_tokens (fitted to the context with
    ``budget.fit_max_tokens``); the worker runs it before any media is decoded."""
    chat = tokenize_chat(template(request.messages, True), tokenizer)
    text = chat.tokens - 3 * len(budget.items)  # the items count their own markers
    max_tokens = budget.max_tokens
    if budget.fit_max_tokens:
        max_tokens = fitted_max_tokens(max_tokens, budget.context - text - budget.vision_tokens)
    check_context(text, budget.vision_tokens, max_tokens, budget.context, budget.items_text)
    return chat, max_tokens


def preflight(request: Request, ctx: PreflightContext, *, fit_max_tokens: bool = False
              ) -> Budget:
    """The token budget of a request; raises before any pixel is decoded when it cannot fit.

    ``fit_max_tokens``: ``max_tokens`` is a cap, not a promise (Ollama's ``num_predict``): a
    prompt that leaves fewer tokens of the context gets a budget with that many (at least
    one; the caller answers with ``budget.max_tokens``). Without it, as OpenAI and vLLM do,
    ``prompt + max_tokens`` over the context is ``context_length_exceeded``.

    Bounded work: the text is tokenized only when it is short (see the module docstring)."""
    items: list[BudgetItem] = []
    bounds = bounds_for(ctx, request)
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.parts()):
            if isinstance(part, ImagePart | ImageUrlPart | VisionTokensPart | ImageRefPart
                          | VideoFramesPart):
                items.append(_media_item(f"messages.{i}.content.{j}", part, bounds, ctx))
    vision = sum(item.tokens for item in items)
    per_item = ", ".join(f"{item.path} {item.tokens}" for item in items) or "none"
    tok = ctx.tokenizer
    segments = ctx.chat_template(request.messages, True)
    size = text_size(request, segments)
    short = tok.exact_is_cheap or size.high_bytes <= ADMISSION_TOKENIZE_BYTES
    if not short:  # a long text: refused on its length if even its fewest tokens cannot fit
        check_context(size.lower_tokens(tok.max_token_bytes), vision,
                      1 if fit_max_tokens else request.max_tokens,
                      ctx.context_length, per_item,
                      text_lower_bound=(size.message_bytes, tok.max_token_bytes))
    exact = short or not tok.byte_level  # without an upper bound: tokenized, bounded by
    chat = None                          # limits.max_text_bytes
    if exact:  # the ids the engine lays out (tokenized once, kept for the worker)
        chat = tokenize_chat(segments, tok) if isinstance(tok, IdTokenizer) else None
        rendered = chat.tokens if chat is not None else count_chat(segments, tok)
        # the rendering holds 3 tokens per item (start, pad, end); items count their own markers
        text_tokens = rendered - 3 * len(items)
    else:  # too long to tokenize here: one token per byte at most; the worker counts it
        text_tokens = size.upper_tokens()
    max_tokens = request.max_tokens
    if fit_max_tokens and exact:  # a long text: the worker fits it on the exact count
        max_tokens = fitted_max_tokens(max_tokens, ctx.context_length - text_tokens - vision)
    budget = Budget(text_tokens, vision, text_tokens + vision, max_tokens,
                    ctx.context_length, tuple(items), tok.name, exact, bounds, chat,
                    fit_max_tokens)
    if exact:
        check_context(text_tokens, vision, max_tokens, ctx.context_length, per_item)
    return budget


def preflight_context(engine: Engine, context: int | None = None, mm: MMLimits | None = None,
                      media: MediaPolicy | None = None) -> PreflightContext:
    """The preflight's view of a loaded engine and the deployment's limits; an ``image_ref``
    costs what the engine's cache holds for it."""
    cache = engine.cache

    def ref_tokens(key: str) -> int | None:
        features = cache.peek(key) if cache is not None else None
        return features.n_tokens if features is not None else None

    return PreflightContext(family=engine.family, context_length=context or engine.context,
                            tokenizer=engine.tokenizer,
                            chat_template=engine.architecture.chat_template,
                            media=media or MediaPolicy(),
                            mm=mm or MMLimits(), max_pixels=engine.max_pixels,
                            min_pixels=engine.min_pixels, ref_tokens=ref_tokens,
                            hidden_size=engine.facts.hidden_size,
                            deepstack_layers=engine.facts.deepstack_layers)
