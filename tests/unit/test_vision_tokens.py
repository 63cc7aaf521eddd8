"""vision_tokens protocol v1 (+ f16 and packed): round trips, every rejection, the log line."""

from __future__ import annotations

import base64
import logging
from typing import Any

import numpy as np
import pytest

from edgevlm.wire.errors import InvalidVisionTokens, PayloadTooLarge
from edgevlm.wire.protocol import VisionTokensPayload
from edgevlm.wire.vision_tokens import (
    MAX_VISION_TOKENS,
    FeatureDtype,
    VisionFeatures,
    decode_vision_tokens,
    encode_vision_tokens,
    expected_bytes,
)

D, K = 2048, 3  # Qwen3-VL-2B: LLM hidden size and DeepStack layers
GRID = (1, 2, 2)
N = 4
ROW_BYTES = "n=4 × d=2048 × 4 bytes f32"


def make_features(n_grid: tuple[int, int, int] = GRID, d: int = D, k: int = K,
                  seed: int = 0) -> VisionFeatures:
    rng = np.random.default_rng(seed)
    n = n_grid[0] * n_grid[1] * n_grid[2]
    emb = rng.standard_normal((n, d), dtype=np.float32)
    ds = rng.standard_normal((k, n, d), dtype=np.float32) if k else None
    return VisionFeatures(emb, ds, n_grid)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def payload(obj: dict[str, Any]) -> VisionTokensPayload:
    return VisionTokensPayload.model_validate(obj)


def reject(obj: dict[str, Any], hidden: int = D, k: int = K) -> str:
    with pytest.raises(InvalidVisionTokens) as info:
        decode_vision_tokens(payload(obj), hidden, k)
    return str(info.value)


@pytest.fixture
def features() -> VisionFeatures:
    return make_features()


@pytest.fixture
def wire(features: VisionFeatures) -> dict[str, Any]:
    return encode_vision_tokens(features)


# --------------------------------------------------------------------------- accepted payloads


def test_f32_separate_round_trip_is_bit_exact(features: VisionFeatures,
                                              wire: dict[str, Any]) -> None:
    got = decode_vision_tokens(payload(wire), D, K)
    assert got.grid == GRID and got.n_tokens == N and got.hidden_size == D
    assert got.has_deepstack and got.deepstack is not None
    assert got.embeddings.dtype == np.float32 and got.deepstack.shape == (K, N, D)
    np.testing.assert_array_equal(got.embeddings, features.embeddings)
    np.testing.assert_array_equal(got.deepstack, features.deepstack)
    assert got.nbytes == N * D * 4 * (1 + K)


def test_default_encoding_is_plain_protocol_v1(features: VisionFeatures) -> None:
    wire = encode_vision_tokens(features)
    assert set(wire) == {"grid", "tokens_b64", "ds_b64"}
    assert wire["grid"] == [1, 2, 2] and len(wire["ds_b64"]) == K
    raw = base64.b64decode(wire["tokens_b64"])
    assert raw == features.embeddings.astype("<f4").tobytes()


def test_accepted_payload_logs_one_info_line_in_the_seed_shape(
        wire: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="edgevlm.wire.vision_tokens"):
        decode_vision_tokens(payload(wire), D, K)
    lines = [r.getMessage() for r in caplog.records if r.name == "edgevlm.wire.vision_tokens"]
    assert lines == ["vision_tokens client-preprocess n=4 d=2048 ds=3 grid=[1,2,2]"]
    assert caplog.records[0].levelno == logging.INFO


def test_without_ds_b64_deepstack_is_none_and_logged_as_ds_0(
        wire: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    obj = {k: v for k, v in wire.items() if k != "ds_b64"}
    with caplog.at_level(logging.INFO, logger="edgevlm.wire.vision_tokens"):
        got = decode_vision_tokens(payload(obj), D, K)
    assert got.deepstack is None and not got.has_deepstack and got.nbytes == N * D * 4
    assert caplog.messages == ["vision_tokens client-preprocess n=4 d=2048 ds=0 grid=[1,2,2]"]


def test_decoded_arrays_are_read_only(wire: dict[str, Any]) -> None:
    got = decode_vision_tokens(payload(wire), D, K)
    assert got.deepstack is not None
    with pytest.raises(ValueError, match="read-only"):
        got.embeddings[0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        got.deepstack[0, 0, 0] = 1.0


def test_f16_round_trip_matches_half_precision_and_halves_the_bytes(
        features: VisionFeatures) -> None:
    wire = encode_vision_tokens(features, dtype="f16")
    assert wire["dtype"] == "f16"
    assert len(base64.b64decode(wire["tokens_b64"])) == expected_bytes(N, D, "f16") == N * D * 2
    got = decode_vision_tokens(payload(wire), D, K)
    assert got.embeddings.dtype == np.float32 and got.deepstack is not None
    assert features.deepstack is not None
    np.testing.assert_array_equal(got.embeddings,
                                  features.embeddings.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(got.deepstack,
                                  features.deepstack.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_packed_rows_are_main_then_deepstack_like_vllm_concat(features: VisionFeatures,
                                                              dtype: FeatureDtype) -> None:
    assert features.deepstack is not None
    wire = encode_vision_tokens(features, dtype=dtype, layout="packed")
    assert wire["layout"] == "packed" and "ds_b64" not in wire
    np_dtype = "<f4" if dtype == "f32" else "<f2"
    concat = np.concatenate([features.embeddings, *features.deepstack], axis=1)  # [n, d*(1+k)]
    assert base64.b64decode(wire["tokens_b64"]) == concat.astype(np_dtype).tobytes()
    got = decode_vision_tokens(payload(wire), D, K)
    assert got.deepstack is not None
    want = features.embeddings.astype(np_dtype).astype(np.float32)
    np.testing.assert_array_equal(got.embeddings, want)
    np.testing.assert_array_equal(got.deepstack,
                                  features.deepstack.astype(np_dtype).astype(np.float32))
    assert got.embeddings.flags.c_contiguous and got.deepstack.flags.c_contiguous


def test_packed_for_a_model_without_deepstack_has_no_deepstack() -> None:
    features = make_features(k=0)
    got = decode_vision_tokens(payload(encode_vision_tokens(features, layout="packed")), D, 0)
    assert got.deepstack is None
    np.testing.assert_array_equal(got.embeddings, features.embeddings)


def test_exactly_4096_tokens_is_accepted() -> None:
    features = make_features((1, 64, 64), d=8, k=0)
    got = decode_vision_tokens(payload(encode_vision_tokens(features)), 8, 0)
    assert got.n_tokens == MAX_VISION_TOKENS


def test_large_finite_values_whose_sum_overflows_are_accepted() -> None:
    emb = np.full((N, D), 3.0e38, dtype=np.float32)
    got = decode_vision_tokens(payload({"grid": GRID, "tokens_b64": b64(emb.tobytes())}), D, K)
    np.testing.assert_array_equal(got.embeddings, emb)


# --------------------------------------------------------------------------- byte counts


def test_the_seeds_three_token_payload_for_grid_1_2_2_is_rejected(
        features: VisionFeatures) -> None:
    obj = {"grid": GRID, "tokens_b64": b64(features.embeddings[:3].tobytes())}
    assert reject(obj) == f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}), got 24576"


@pytest.mark.parametrize(("delta", "got"), [(-4, 32764), (4, 32772)])
def test_tokens_one_float_short_or_long_is_rejected(features: VisionFeatures, delta: int,
                                                    got: int) -> None:
    raw = features.embeddings.tobytes()
    raw = raw[:delta] if delta < 0 else raw + b"\0" * delta
    assert reject({"grid": GRID, "tokens_b64": b64(raw)}) == (
        f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}), got {got}")


def test_one_ds_entry_of_wrong_length_rejects_the_whole_payload(wire: dict[str, Any]) -> None:
    ds = list(wire["ds_b64"])
    ds[1] = b64(base64.b64decode(ds[1])[:-4])
    assert reject(dict(wire, ds_b64=ds)) == (
        f"vision_tokens.ds_b64[1]: expected 32768 bytes ({ROW_BYTES}), got 32764")


def test_wrong_ds_count_is_rejected(wire: dict[str, Any]) -> None:
    assert reject(dict(wire, ds_b64=wire["ds_b64"][:2])) == (
        "vision_tokens.ds_b64: expected 3 entries (the model's DeepStack layers) or none, got 2")
    assert reject(dict(wire, ds_b64=[])) == (
        "vision_tokens.ds_b64: expected 3 entries (the model's DeepStack layers) or none, got 0")
    assert reject(wire, k=0) == (
        "vision_tokens.ds_b64: expected 0 entries (the model's DeepStack layers) or none, got 3")


def test_more_than_three_ds_entries_are_rejected(wire: dict[str, Any]) -> None:
    four = [*wire["ds_b64"], wire["ds_b64"][0]]
    assert reject(dict(wire, ds_b64=four)) == (
        "vision_tokens.ds_b64: expected at most 3 entries, got 4")


def test_packed_with_ds_b64_is_rejected(features: VisionFeatures, wire: dict[str, Any]) -> None:
    packed = encode_vision_tokens(features, layout="packed")
    assert reject(dict(packed, ds_b64=wire["ds_b64"])) == (
        "vision_tokens.ds_b64: expected no entries with layout 'packed' (the 3 DeepStack "
        "features are inside each tokens_b64 row), got 3")


def test_packed_payload_sized_for_another_k_is_rejected(features: VisionFeatures) -> None:
    packed = encode_vision_tokens(features, layout="packed")  # k = 3
    assert reject(packed, k=2) == (
        "vision_tokens.tokens_b64: expected 98304 bytes (n=4 × d=2048 × (1+k=2) × 4 bytes f32, "
        "layout packed), got 131072")


def test_f16_payload_declared_as_f32_is_rejected(features: VisionFeatures) -> None:
    f16 = encode_vision_tokens(features, dtype="f16")
    assert reject(dict(f16, dtype="f32", ds_b64=None)) == (
        f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}), got 16384")


def test_features_of_another_hidden_size_are_rejected(wire: dict[str, Any]) -> None:
    assert reject(wire, hidden=4096) == ("vision_tokens.tokens_b64: expected 65536 bytes "
                                         "(n=4 × d=4096 × 4 bytes f32), got 32768")


def test_a_huge_wrong_payload_is_rejected_without_decoding_it(decoded_lengths: list[int]) -> None:
    huge = "AAAA" * (8 * 2**20)  # 24 MiB of zeros for a 4-token grid
    message = reject({"grid": GRID, "tokens_b64": huge})
    assert message == f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}), got 25165824"
    assert max(decoded_lengths, default=0) <= 8  # only the tail was looked at


def test_wrong_ds_length_is_found_before_any_entry_is_decoded(
        wire: dict[str, Any], decoded_lengths: list[int]) -> None:
    ds = [*wire["ds_b64"][:2], wire["ds_b64"][2][:-8]]
    assert reject(dict(wire, ds_b64=ds)).startswith("vision_tokens.ds_b64[2]: expected 32768")
    assert max(decoded_lengths, default=0) <= 8
    decode_vision_tokens(payload(wire), D, K)  # the spy does see real decoding
    assert max(decoded_lengths) == len(wire["tokens_b64"])


def test_payload_over_the_boards_byte_limit_is_payload_too_large(wire: dict[str, Any]) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        decode_vision_tokens(payload(dict(wire, tokens_b64="not even base64")), D, K,
                             max_bytes=100_000)
    assert str(info.value) == (
        "vision_tokens: 131072 bytes of features (n=4 × d=2048 × 4 sets × 4 bytes f32) exceed "
        "this board's limit of 100000 bytes per part")
    assert decode_vision_tokens(payload(wire), D, K, max_bytes=131072).n_tokens == N


# --------------------------------------------------------------------------- grid


@pytest.mark.parametrize("grid", [(1, 0, 2), (0, 2, 2), (1, 2, -1)])
def test_grid_entry_below_one_is_rejected(wire: dict[str, Any],
                                          grid: tuple[int, int, int]) -> None:
    assert reject(dict(wire, grid=grid)) == (
        f"vision_tokens.grid: every entry of [gt, gh, gw] must be >= 1, got "
        f"[{grid[0]}, {grid[1]}, {grid[2]}]")


def test_grid_over_4096_tokens_is_rejected(wire: dict[str, Any]) -> None:
    assert reject(dict(wire, grid=(1, 64, 65))) == (
        "vision_tokens.grid: expected at most 4096 vision tokens, got n = 1×64×65 = 4160")


def test_grid_that_does_not_match_the_rows_is_rejected(wire: dict[str, Any]) -> None:
    # the seed's B-3 question: [1, 3, 3] with 4 rows of features
    assert reject(dict(wire, grid=(1, 3, 3))) == ("vision_tokens.tokens_b64: expected 73728 "
                                                  "bytes (n=9 × d=2048 × 4 bytes f32), got 32768")


# --------------------------------------------------------------------------- strict base64

NOT_STRICT = ("not strict base64 (contains characters outside A-Z a-z 0-9 + / or misplaced "
              "'=' padding (no whitespace, no URL-safe alphabet))")


def _replace_at(text: str, index: int, char: str) -> str:
    return text[:index] + char + text[index + 1:]


@pytest.mark.parametrize("char", [" ", "\n", "\t", "é"])
def test_whitespace_or_non_ascii_inside_base64_is_rejected(wire: dict[str, Any],
                                                           char: str) -> None:
    bad = _replace_at(wire["tokens_b64"], 1000, char)
    assert reject(dict(wire, tokens_b64=bad)) == f"vision_tokens.tokens_b64: {NOT_STRICT}"


def test_mime_line_breaks_are_rejected_by_length(wire: dict[str, Any]) -> None:
    text = wire["tokens_b64"]
    wrapped = "\n".join(text[i:i + 76] for i in range(0, len(text), 76))
    assert reject(dict(wire, tokens_b64=wrapped)) == (
        f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}) = 43692 base64 "
        f"characters, got {len(wrapped)} characters, not strict base64 (the length must be a "
        "multiple of 4: no whitespace or line breaks, '=' padding included)")


def test_url_safe_alphabet_is_rejected(features: VisionFeatures, wire: dict[str, Any]) -> None:
    url_safe = base64.urlsafe_b64encode(features.embeddings.tobytes()).decode()
    assert "-" in url_safe or "_" in url_safe
    assert reject(dict(wire, tokens_b64=url_safe)) == f"vision_tokens.tokens_b64: {NOT_STRICT}"


def test_extra_padding_is_rejected(wire: dict[str, Any]) -> None:
    text = wire["tokens_b64"]
    assert text.endswith("=") and not text.endswith("==")  # 32768 % 3 == 2
    assert reject(dict(wire, tokens_b64=text + "====")) == (
        f"vision_tokens.tokens_b64: {NOT_STRICT}")
    assert "multiple of 4" in reject(dict(wire, tokens_b64=text + "="))


def test_missing_or_misplaced_padding_is_rejected(wire: dict[str, Any]) -> None:
    text = wire["tokens_b64"]
    assert "multiple of 4" in reject(dict(wire, tokens_b64=text[:-1]))
    assert reject(dict(wire, tokens_b64=_replace_at(text, 100, "="))) == (
        f"vision_tokens.tokens_b64: {NOT_STRICT}")
    # two pad characters where one is due: decodes to one byte too few
    assert reject(dict(wire, tokens_b64=text[:-2] + "==")) == (
        f"vision_tokens.tokens_b64: expected 32768 bytes ({ROW_BYTES}), got 32767")


def test_bad_base64_in_a_ds_entry_names_the_entry(wire: dict[str, Any]) -> None:
    ds = list(wire["ds_b64"])
    ds[2] = _replace_at(ds[2], 5, "_")
    assert reject(dict(wire, ds_b64=ds)) == f"vision_tokens.ds_b64[2]: {NOT_STRICT}"


# --------------------------------------------------------------------------- finite values


def test_nan_in_tokens_is_rejected_with_its_position(features: VisionFeatures) -> None:
    emb = features.embeddings.copy()
    emb[2, 5] = np.nan
    assert reject({"grid": GRID, "tokens_b64": b64(emb.tobytes())}) == (
        "vision_tokens.tokens_b64: expected finite values, got nan at token 2, value 5 "
        "(1 non-finite values in this block)")


def test_inf_in_one_ds_entry_is_rejected(wire: dict[str, Any],
                                         features: VisionFeatures) -> None:
    assert features.deepstack is not None
    ds1 = features.deepstack[1].copy()
    ds1[3, 2047] = -np.inf
    ds1[0, 0] = np.inf
    obj = dict(wire, ds_b64=[wire["ds_b64"][0], b64(ds1.tobytes()), wire["ds_b64"][2]])
    assert reject(obj) == ("vision_tokens.ds_b64[1]: expected finite values, got inf at token 0, "
                           "value 0 (2 non-finite values in this block)")


def test_nan_in_a_packed_deepstack_value_names_the_packed_column(
        features: VisionFeatures) -> None:
    assert features.deepstack is not None
    ds = features.deepstack.copy()
    ds[1, 3, 7] = np.nan  # DeepStack set 1 sits at columns [2d, 3d) of a packed row
    rows = np.concatenate([features.embeddings, *ds], axis=1)
    packed = {"grid": GRID, "tokens_b64": b64(rows.tobytes()), "layout": "packed"}
    assert reject(packed) == ("vision_tokens.tokens_b64: expected finite values, got nan at "
                              "token 3, value 4103 (1 non-finite values in this block)")


def test_nan_in_an_f16_payload_is_rejected(features: VisionFeatures) -> None:
    half = features.embeddings.astype("<f2")
    half[0, 1] = np.nan
    obj = {"grid": GRID, "tokens_b64": b64(half.tobytes()), "dtype": "f16"}
    assert reject(obj) == ("vision_tokens.tokens_b64: expected finite values, got nan at token 0, "
                           "value 1 (1 non-finite values in this block)")


# --------------------------------------------------------------------------- helpers and API


def test_expected_bytes_per_dtype() -> None:
    assert expected_bytes(4, 2048, "f32") == 32768
    assert expected_bytes(784, 2048, "f16") == 784 * 2048 * 2
    with pytest.raises(ValueError, match="dtype"):
        expected_bytes(4, 2048, "bf16")


def test_encoding_values_beyond_float16_range_is_refused() -> None:
    emb = np.full((N, 8), 70000.0, dtype=np.float32)
    assert encode_vision_tokens(VisionFeatures(emb, None, GRID))["tokens_b64"]
    with pytest.raises(ValueError, match="float16"):
        encode_vision_tokens(VisionFeatures(emb, None, GRID), dtype="f16")


def test_encoding_non_finite_features_is_refused() -> None:
    emb = np.zeros((N, 8), dtype=np.float32)
    emb[1, 1] = np.nan
    for layout in ("separate", "packed"):
        with pytest.raises(ValueError, match="non-finite"):
            encode_vision_tokens(VisionFeatures(emb, None, GRID), layout=layout)


def test_board_side_model_facts_are_checked(wire: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="hidden_size"):
        decode_vision_tokens(payload(wire), 0, K)
    with pytest.raises(ValueError, match="deepstack_layers"):
        decode_vision_tokens(payload(wire), D, 4)


def test_vision_features_refuses_shapes_that_do_not_fit_the_grid() -> None:
    emb = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="grid"):
        VisionFeatures(emb, None, (1, 3, 3))
    with pytest.raises(ValueError, match="deepstack shape"):
        VisionFeatures(emb, np.zeros((3, 4, 9), dtype=np.float32), GRID)
    with pytest.raises(ValueError, match="float32"):
        VisionFeatures(emb.astype(np.float64), None, GRID)
    with pytest.raises(ValueError, match="C-contiguous"):
        VisionFeatures(np.zeros((8, 4), dtype=np.float32).T, None, GRID)
