"""The text budget is bounded by length before anything tokenizes (issue 20, finding 2).

Admission runs on the MQTT network thread. Tokenizing runs at 0.4–2.4 MB/s, so a request of
megabytes of text held that thread for seconds. Now: ``limits.max_text_bytes`` refuses by
length; a long text whose fewest possible tokens (bytes / the longest token's bytes) cannot fit
is refused without tokenizing; only a short text is tokenized at admission, a longer one is
admitted on its upper bound (one token per byte) and counted by the worker before the vision
encoder runs. The bounds are checked here against the tokenizers themselves (the demo model's,
the real Qwen vocabulary, the one rebuilt from llama.cpp arrays) on hostile Unicode, and
tokenizing no longer holds the GIL or a lock the network thread could wait on.
"""

from __future__ import annotations

import json
import random
import threading
import time
import unicodedata
from collections.abc import Callable
from typing import Any

import pytest
from tokenizers import Tokenizer, pre_tokenizers

from edgevlm.config import validate_config
from edgevlm.engine import Engine
from edgevlm.engine.families.qwen3vl import render_segments as qwen3vl_chat
from edgevlm.models import demo_model_dir
from edgevlm.pipeline.admission import RequestSide, admit
from edgevlm.pipeline.limits import RequestLimits
from edgevlm.pipeline.preflight import (
    ADMISSION_TOKENIZE_BYTES,
    PreflightContext,
    preflight_context,
    text_size,
)
from edgevlm.pipeline.run import run_admitted
from edgevlm.tokenizer import (
    QWEN_ADDED_TOKENS,
    ByteCountTokenizer,
    HFTokenizer,
    TextTokenizer,
    count_chat,
    utf8_bounds,
)
from edgevlm.tokenizer_gguf import tokenizer_from_ggml
from edgevlm.vision.sizing import get_family
from edgevlm.wire.errors import ContextLengthExceeded, PayloadTooLarge
from edgevlm.wire.protocol import parse_request
from tests.helpers import image, image_bytes, text, user_request
from tests.qwen_tokenizers import (
    CORPUS,
    LLAMACPP_CHKTXT,
    ggml_arrays,
    qwen_reference_tokenizer,
    train_tiny_tokenizer,
)

QWEN3 = get_family("qwen3-vl")
SPECIALS = "".join(t for t, _ in QWEN_ADDED_TOKENS)


def _hostile_texts() -> list[str]:
    rng = random.Random(20)
    pool = ("\u0958\U0001d160\u1100\u1161\u11a8e\u0301\u1e69\u1f82\uac00 \t\n\r=-_."
            "aZ09\u4e00\u9fff\U0001f680\u200d\ufe0f\u0300\u0345")
    return [
        *CORPUS, LLAMACPP_CHKTXT, SPECIALS, SPECIALS * 3 + "<think>x</think>",
        "\u0958" * 300,                        # NFC grows it: 3 bytes -> 6
        "\U0001d160" * 200,                    # 4 bytes -> 12
        "\u1100\u1161\u11a8" * 300,            # Hangul jamo: 9 bytes -> 3
        "e\u0301" * 300, " " * 5000, "=" * 5000, "\r\n" * 2000, "9" * 3000,
        " " * 127 + "x", " " * 128 + "x", " " * 129 + "x",
        *("".join(rng.choice(pool) for _ in range(rng.randint(1, 3000))) for _ in range(40)),
    ]


def _demo_tokenizer() -> HFTokenizer:
    return Engine.load(demo_model_dir(), threads=1).tokenizer


def _ggml_tokenizer() -> HFTokenizer:
    tiny = train_tiny_tokenizer()
    tokens, types, merges = ggml_arrays(tiny, tiny.get_vocab_size())
    return HFTokenizer(tokenizer_from_ggml(tokens, merges, types, "qwen2"), name="ggml")


TOKENIZERS: dict[str, Callable[[], HFTokenizer]] = {
    "demo": _demo_tokenizer,
    "tiny": lambda: HFTokenizer(train_tiny_tokenizer(), name="tiny"),
    "ggml": _ggml_tokenizer,
    "qwen": lambda: HFTokenizer(qwen_reference_tokenizer(), name="qwen"),
}


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def tok(request: pytest.FixtureRequest) -> HFTokenizer:
    return TOKENIZERS[request.param]()


# --------------------------------------------------------------------------- the bounds


def test_utf8_bounds_cover_the_text_and_its_nfc_form() -> None:
    assert utf8_bounds("hello") == (5, 5)
    assert utf8_bounds("\u0958") == (3, 6)
    assert utf8_bounds("\U0001d160") == (4, 12)
    assert utf8_bounds("\u1100\u1161\u11a8") == (3, 9)
    assert utf8_bounds("caf\u00e9") == (5, 5)


def test_the_tokenizers_are_byte_level_with_their_longest_token(tok: HFTokenizer) -> None:
    assert tok.byte_level
    assert tok.max_token_bytes is not None
    if tok.name == "qwen":
        assert tok.max_token_bytes == 128  # a run of 128 spaces is one token
        assert len(tok.encode_text(" " * 256)) == 2    # the bound is reached: 256 / 128
        assert len(tok.encode_text(" " * 129)) == 2
    # every BPE token is spelled in ByteLevel's alphabet, one character per byte: its length
    # is its bytes, and the longest one (or a non-special added token) is the bound
    raw: Tokenizer = tok._tok
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    vocab = raw.get_vocab(with_added_tokens=False)
    assert all(set(t) <= alphabet for t in vocab)
    added = [a.content for a in raw.get_added_tokens_decoder().values() if not a.special]
    assert tok.max_token_bytes == max(*map(len, vocab), *(len(a.encode()) for a in added))


def test_every_text_lies_between_its_length_bounds(tok: HFTokenizer) -> None:
    """fewest = ceil(bytes / longest token), most = bytes, over NFC growth and shrinkage,
    special strings read as text and the template's pieces."""
    assert tok.max_token_bytes is not None
    for sample in _hostile_texts():
        n = len(tok.encode_text(sample))
        low, high = utf8_bounds(sample)
        assert -(-low // tok.max_token_bytes) <= n <= high, (sample[:60], n, low, high)
        req = parse_request(user_request(text(sample), max_tokens=1))
        size = text_size(req, qwen3vl_chat(req.messages, True))
        exact = _text_tokens(req, tok)
        assert size.lower_tokens(tok.max_token_bytes) <= exact <= size.upper_tokens()


def test_encode_text_and_encode_read_specials_as_the_tokenizer_does(tok: HFTokenizer) -> None:
    """No lock and no flag toggled per call: encode cuts the special tokens itself."""
    plain = Tokenizer.from_str(tok._tok.to_str())
    parsing = Tokenizer.from_str(tok._tok.to_str())
    plain.encode_special_tokens = True
    for sample in [*_hostile_texts()[:20], "<|im_start|>user\nhi<|im_end|>\n<think>"]:
        assert tok.encode_text(sample) == plain.encode(sample, add_special_tokens=False).ids
        assert tok.encode(sample) == parsing.encode(sample, add_special_tokens=False).ids


# --------------------------------------------------------------------------- threads


def test_tokenizing_releases_the_gil_and_takes_no_lock() -> None:
    """A worker tokenizing a long prompt neither holds the GIL (``encode`` did: the network
    thread stopped for the whole call) nor a lock a short admission count waits on."""
    tok = _demo_tokenizer()
    long_text = " ".join(random.Random(1).choice(["door", "van", "cat", "x1", "é"])
                         for _ in range(120_000))
    done = threading.Event()
    took: list[float] = []

    def worker() -> None:
        t0 = time.perf_counter()
        tok.encode_text(long_text)
        took.append(time.perf_counter() - t0)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    time.sleep(0.01)
    gaps, counts = [], []
    last = time.perf_counter()
    while not done.is_set():
        t0 = time.perf_counter()
        assert tok.count_text("who is at the door?") > 0
        counts.append(time.perf_counter() - t0)
        time.sleep(0.002)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    thread.join()
    print(f"\nworker tokenized {len(long_text)} bytes in {took[0] * 1e3:.0f} ms; meanwhile "
          f"{len(counts)} short counts, slowest {max(counts) * 1e3:.1f} ms, longest pause "
          f"{max(gaps) * 1e3:.1f} ms")
    assert took[0] > 0.1
    assert len(counts) >= 5 and max(gaps) < took[0] / 2


# --------------------------------------------------------------------------- admission


class Spy:
    """A tokenizer that records the length of every text it tokenizes."""

    def __init__(self, inner: HFTokenizer) -> None:
        self.inner = inner
        self.name = inner.name
        self.max_token_bytes = inner.max_token_bytes
        self.byte_level = inner.byte_level
        self.exact_is_cheap = False
        self.lengths: list[int] = []

    def count(self, text: str) -> int:
        self.lengths.append(len(text))
        return self.inner.count(text)

    def count_text(self, text: str) -> int:
        self.lengths.append(len(text))
        return self.inner.count_text(text)

    def encode_text(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        return self.inner.encode_text(text)

    def control_id(self, token: str) -> int:
        return self.inner.control_id(token)


def _words(n_bytes: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = ["the ", "door ", "van ", "parcel ", "14:32 ", "(a) "]
    return "".join(rng.choices(words, k=n_bytes // 3 + 1))[:n_bytes]


def _side(tokenizer: Any, context: int = 4096, **limits: Any) -> RequestSide:
    return RequestSide(RequestLimits(**limits), PreflightContext(
        family=QWEN3, context_length=context, tokenizer=tokenizer,
        chat_template=qwen3vl_chat))


def _payload(body: str, max_tokens: int = 16, *parts: dict[str, Any]) -> bytes:
    return json.dumps(user_request(*parts, text(body), max_tokens=max_tokens)).encode()


def test_text_over_max_text_bytes_is_refused_before_anything_tokenizes() -> None:
    spy = Spy(_demo_tokenizer())
    for n in (64 * 1024 + 1, 2_000_000, 15_000_000):
        payload = _payload(_words(n))
        t0 = time.perf_counter()
        with pytest.raises(PayloadTooLarge) as info:
            admit(payload, _side(spy))
        took = time.perf_counter() - t0
        print(f"\n{n} bytes of text refused in {took * 1e3:.1f} ms: {info.value.message}")
        assert info.value.message == (f"the messages' text is {n} bytes, the limit is 65536 "
                                      "(limits.max_text_bytes); send less text")
        assert took < 1.0  # JSON parsing: ~15 ms for 15 MB
    assert spy.lengths == []


def test_max_text_bytes_counts_every_text_part_in_utf8() -> None:
    side = _side(ByteCountTokenizer(), context=10**6, max_text_bytes=100)
    two = json.dumps({"messages": [
        {"role": "system", "content": "é" * 30},
        {"role": "user", "content": [{"type": "text", "text": "x" * 40}]}]}).encode()
    admit(two, side)  # 60 + 40 = 100
    with pytest.raises(PayloadTooLarge, match="text is 101 bytes, the limit is 100"):
        admit(two.replace(b'"x', b'"xx', 1), side)


def test_a_long_text_that_cannot_fit_by_its_length_is_refused_without_tokenizing() -> None:
    spy = Spy(_demo_tokenizer())  # the demo's longest token: 16 bytes
    with pytest.raises(ContextLengthExceeded) as info:
        admit(_payload(_words(60_000), 1000), _side(spy))
    assert info.value.message == (
        "the text is too long: 60000 bytes of message text are at least 3756 tokens with the "
        "template (a token of this model is at most 16 bytes); + vision 0 (none) + max_tokens "
        "1000 = 4756, the context is 4096 (model.context); send less text or a lower max_tokens")
    assert spy.lengths == []


def test_a_long_text_is_admitted_on_its_upper_bound_without_tokenizing() -> None:
    spy = Spy(_demo_tokenizer())
    jpeg = image_bytes(64, 64)
    admitted = admit(_payload(_words(40_000), 16, image(jpeg)), _side(spy))
    budget = admitted.budget
    assert not budget.text_exact and budget.to_json()["text_exact"] is False
    size = text_size(admitted.request, qwen3vl_chat(admitted.request.messages, True))
    assert budget.text_tokens == size.upper_tokens() == 40_000 + len("user\n\nassistant\n") + 3
    assert budget.prompt_tokens == budget.text_tokens + budget.vision_tokens
    assert spy.lengths == []


def test_a_short_text_is_counted_exactly_at_admission() -> None:
    spy = Spy(_demo_tokenizer())
    body = _words(ADMISSION_TOKENIZE_BYTES - 40)
    budget = admit(_payload(body), _side(spy)).budget
    assert budget.text_exact
    assert budget.text_tokens == _text_tokens(parse_request(_payload(body)), spy.inner)
    assert budget.chat is not None and budget.chat.tokens == budget.text_tokens  # kept
    assert max(spy.lengths) <= ADMISSION_TOKENIZE_BYTES
    # over the context by its exact count: the numbers of the prompt
    with pytest.raises(ContextLengthExceeded, match=r"^prompt is \d+ tokens \(text \d+, "
                                                    r"vision 0: none\) \+ max_tokens 4000"):
        admit(_payload(body, 4000), _side(spy))


def test_admission_tokenizes_at_most_a_few_milliseconds() -> None:
    """The bound on the network thread, measured: ADMISSION_TOKENIZE_BYTES of English and of
    random ASCII (the slowest text measured) with the demo and the Qwen vocabularies."""
    rng = random.Random(3)
    texts = {"english": _words(ADMISSION_TOKENIZE_BYTES),
             "random": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 .,;")
                               for _ in range(ADMISSION_TOKENIZE_BYTES))}
    for name in ("demo", "qwen"):
        tok = TOKENIZERS[name]()
        for kind, sample in texts.items():
            best = min(_timed(tok.count_text, sample) for _ in range(5))
            big = _words(64 * 1024) if kind == "english" else sample * 16
            big_s = min(_timed(tok.count_text, big) for _ in range(2))
            print(f"\n{name} {kind}: {ADMISSION_TOKENIZE_BYTES} bytes in {best * 1e3:.1f} ms, "
                  f"64 KiB in {big_s * 1e3:.0f} ms ({len(big) / big_s / 1e6:.2f} MB/s)")
            assert best < 0.05  # ~2-9 ms measured on a shared 2-core machine


def _timed(fn: Callable[[str], int], arg: str) -> float:
    t0 = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- the worker


def _text_tokens(req: Any, tok: TextTokenizer) -> int:
    """The exact text tokens of a request (its items' 3 placeholder tokens each left out)."""
    n_items = sum(1 for p in req.parts() if p.type != "text")
    return count_chat(qwen3vl_chat(req.messages, True), tok) - 3 * n_items


def test_the_worker_refuses_a_long_text_before_decoding_any_media(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import edgevlm.pipeline.run

    engine = Engine.load(demo_model_dir(), threads=1, context=4096)
    payload = _payload(_words(40_000), 16, image(image_bytes(64, 64)))
    side = RequestSide(RequestLimits(), preflight_context(engine))
    admitted = admit(payload, side)
    budget = admitted.budget  # admitted on its upper bound
    assert not budget.text_exact and budget.chat is None
    req = admitted.request
    monkeypatch.setattr(edgevlm.pipeline.run, "prepare_request_media",
                        lambda *a: pytest.fail("the media were decoded"))
    monkeypatch.setattr(engine, "encode_prepared", lambda *a: pytest.fail("the ViT ran"))
    with pytest.raises(ContextLengthExceeded) as info:
        run_admitted(engine, admitted, side.preflight)
    text_tokens = _text_tokens(req, engine.tokenizer)
    vision = budget.vision_tokens  # the image's grid, as admission counted it
    assert info.value.message.startswith(
        f"prompt is {text_tokens + vision} tokens (text {text_tokens}, vision {vision}: "
        f"messages.0.content.0 {vision}) + max_tokens 16 = {text_tokens + vision + 16}, the "
        "context is 4096 (model.context)")


def test_text_pieces_are_the_ones_count_chat_tokenizes() -> None:
    req = parse_request(json.dumps({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "image", "image": image(image_bytes(8, 8))[
                                         "image"]}, {"type": "text", "text": "b"}]}]}))
    segments = qwen3vl_chat(req.messages, True)
    size = text_size(req, segments)
    pieces = [p for p in segments if isinstance(p, str)]
    assert [high for _, high in size.pieces] == [len(p.encode()) for p in pieces]
    assert size.message_bytes == len("be brief") + 2
    bytes_tok = ByteCountTokenizer()
    assert _text_tokens(req, bytes_tok) == size.upper_tokens()


def test_the_config_key_and_its_default() -> None:
    assert validate_config({}).limits.max_text_bytes == 64 * 1024
    limits = validate_config({"limits": {"max_text_bytes": "1 MiB"}}).limits
    assert limits.request_limits().max_text_bytes == 2**20
    assert unicodedata.is_normalized("NFC", "x")  # (the bounds' NFC is Python's)
