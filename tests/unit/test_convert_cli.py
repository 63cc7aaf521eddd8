"""edgevlm convert on the command line: exit codes, clear errors for bad input (never a
traceback), the JSON summary and progress, subcommand wiring, and flat memory while streaming.

These run without torch: checkpoints are written with numpy (shapes from the converter's own
tables; test_convert.py checks those tables against transformers).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from edgevlm.convert.cli import add_convert_parser, main
from edgevlm.convert.safetensors_mmap import SafetensorsCheckpoint
from tests.qwen3vl_checkpoints import (
    legacy_config_dict,
    write_numpy_checkpoint,
    write_safetensors,
)
from tests.qwen_tokenizers import train_tiny_tokenizer

Mutate = Callable[[Path], None]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tiny_tokenizer()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tok: Tokenizer) -> Path:
    out = tmp_path_factory.mktemp("base") / "ckpt"
    write_numpy_checkpoint(out, tok, legacy_config_dict(tok))
    return out


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_summary_and_progress(base: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run([str(base), "-o", str(tmp_path), "--type", "q8_0", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["type"] == "q8_0" and summary["vision_type"] == "f16"
    assert summary["tensors"] == {"model": 24, "mmproj": 58}
    assert summary["model"] == str(tmp_path / "model.gguf")
    assert (tmp_path / "model.gguf").stat().st_size == summary["bytes"]["model"]
    assert len(summary["fingerprint"]) == 64 and summary["tied_embeddings"] is True
    assert "[1/82] model.gguf token_embd.weight Q8_0" in err
    assert "[82/82] mmproj.gguf mm.2.bias F32" in err and "MB written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mmproj.gguf", "model.gguf"]


def test_vision_type_defaults_to_f32_with_type_f32(base: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([str(base), "-o", str(tmp_path), "--type", "f32", "--json", "-q"], capsys)
    assert code == 0 and json.loads(out)["vision_type"] == "f32"


# The base checkpoint's vision tower: attn_qkv, attn_out and ffn_up rows hold 64 values (the
# hidden size), ffn_down rows 80 (the MLP), mm.0 / mm.2 and the DeepStack fc1 / fc2 rows 256
# (4 merged patches of 64).
@pytest.mark.parametrize(("vision_type", "k_type", "fallback", "file_type"),
                         [("q4_k", "Q4_K", "Q5_0", 15), ("q6_k", "Q6_K", "Q8_0", 18)])
def test_vision_k_type_keeps_256_wide_rows_and_falls_back_per_tensor_as_llama_cpp(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], vision_type: str,
        k_type: str, fallback: str, file_type: int) -> None:
    from tests.gguf_read import read_gguf

    code, out, err = run([str(base), "-o", str(tmp_path), "--type", "q8_0", "--vision-type",
                          vision_type, "--json", "-q"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    mmproj = read_gguf(tmp_path / "mmproj.gguf")
    got = {name: t.tensor_type.name for name, t in mmproj.tensors.items()}
    wanted = dict.fromkeys(got, "F32")   # 1-d tensors, patch and position embeddings
    for n in range(3):
        wanted |= {f"v.blk.{n}.{m}.weight": fallback for m in ("attn_qkv", "attn_out", "ffn_up")}
        wanted[f"v.blk.{n}.ffn_down.weight"] = "F16"   # 80: not a multiple of 32 either
    wanted |= {f"v.deepstack.{layer}.{fc}.weight": k_type for layer in (0, 1)
               for fc in ("fc1", "fc2")}
    wanted |= {"mm.0.weight": k_type, "mm.2.weight": k_type}
    assert got == wanted
    assert summary["vision_type"] == vision_type
    assert {n: f for n, f in summary["fallbacks"].items() if n.startswith("v.")} == {
        n: f"{k_type}->{t}" for n, t in wanted.items() if t not in ("F32", k_type)}
    assert mmproj.fields["general.file_type"][0] == file_type


def test_subcommand_wiring_is_one_call(base: Path, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="edgevlm")
    add_convert_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["convert", str(base), "-o", str(tmp_path), "-q"])
    assert args.func(args) == 0
    assert (tmp_path / "mmproj.gguf").is_file()


def _config(key_path: tuple[str, ...], value: object) -> Mutate:
    def mutate(ckpt: Path) -> None:
        cfg = json.loads((ckpt / "config.json").read_text())
        node = cfg
        for key in key_path[:-1]:
            node = node[key]
        node[key_path[-1]] = value
        (ckpt / "config.json").write_text(json.dumps(cfg))
    return mutate


def _remove(name: str) -> Mutate:
    return lambda ckpt: (ckpt / name).unlink()


def _tensors(edit: Callable[[dict[str, np.ndarray]], dict[str, str] | None]) -> Mutate:
    def mutate(ckpt: Path) -> None:
        with SafetensorsCheckpoint([ckpt / "model.safetensors"]) as source:
            tensors = {name: np.array(source.rows(rec, 0, rec.n_rows))
                       for name, rec in source.tensors.items()}
        dtypes = edit(tensors)
        write_safetensors(ckpt / "model.safetensors", tensors, dtypes)
    return mutate


def _as_f64(t: dict[str, np.ndarray]) -> dict[str, str]:
    name = "model.visual.merger.norm.weight"
    t[name] = t[name].astype(np.float64)
    return {}


def _wrong_shape(t: dict[str, np.ndarray]) -> None:
    t["model.language_model.norm.weight"] = np.ones(48, np.float32)


def _missing(t: dict[str, np.ndarray]) -> None:
    del t["model.language_model.layers.1.mlp.up_proj.weight"]


def _extra(t: dict[str, np.ndarray]) -> None:
    t["mtp.layers.0.weight"] = np.ones(4, np.float32)


def _truncate(ckpt: Path) -> None:
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def _index_without_shard(ckpt: Path) -> None:
    (ckpt / "model.safetensors").rename(ckpt / "model-00001-of-00002.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))


BAD_INPUTS: dict[str, tuple[Mutate, str]] = {
    "missing config": (_remove("config.json"), "config.json is missing"),
    "llama config": (_config(("model_type",), "llama"), "not a Qwen3-VL config: model_type "
                     "'llama'"),
    "moe config": (_config(("model_type",), "qwen3_vl_moe"), "MoE variant is not supported"),
    "no text_config": (_config(("text_config",), None), "text_config and vision_config"),
    "bad mrope": (_config(("text_config", "rope_scaling", "mrope_section"), [4, 4, 4]),
                  "does not cover head_dim"),
    "missing weights": (_remove("model.safetensors"), "no weights"),
    "missing tokenizer": (_remove("tokenizer.json"), "tokenizer.json is missing"),
    "missing preprocessor": (_remove("preprocessor_config.json"),
                             "preprocessor_config.json is missing"),
    "f64 tensor": (_tensors(_as_f64), "dtype F64; edgevlm convert reads F32, F16 and BF16"),
    "wrong shape": (_tensors(_wrong_shape), "has shape [48], config.json implies [64]"),
    "missing tensor": (_tensors(_missing), "no tensor model.language_model.layers.1.mlp.up"),
    "extra tensor": (_tensors(_extra), "not part of dense Qwen3-VL (first: mtp.layers"),
    "truncated file": (_truncate, "not a safetensors file"),
    "index names a missing shard": (_index_without_shard, "shards that are missing"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_a_clear_message(case: str, base: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    mutate, message = BAD_INPUTS[case]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(base, ckpt)
    mutate(ckpt)
    code, out, err = run([str(ckpt), "-o", str(tmp_path / "out"), "-q"], capsys)
    assert code == 2, err
    assert err.startswith("edgevlm convert: ") and message in err, err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "out" / "model.gguf").exists()


def test_usage_errors_exit_2(base: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([str(tmp_path / "nowhere"), "-o", str(tmp_path)], capsys)
    assert code == 2 and "is not a directory" in err
    code, _, err = run([str(base), "-o", str(tmp_path), "--vision-type", "q4_0"], capsys)
    assert code == 2 and "invalid choice: 'q4_0'" in err
    (tmp_path / "file").write_text("x")
    code, _, err = run([str(base), "-o", str(tmp_path / "file"), "-q"], capsys)
    assert code == 2 and "cannot create" in err and "Traceback" not in err


def test_write_failure_exits_1_and_leaves_no_partial_files(
        base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mmproj.gguf.part").mkdir()  # the vision file cannot be opened
    code, _, err = run([str(base), "-o", str(tmp_path), "-q"], capsys)
    assert code == 1 and "edgevlm convert: " in err and "Traceback" not in err
    assert not (tmp_path / "model.gguf").exists()
    assert not (tmp_path / "model.gguf.part").exists()


def test_redundant_lm_head_of_a_tied_model_is_skipped(
        base: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from gguf import GGUFReader

    from edgevlm.convert import convert_checkpoint

    ckpt = tmp_path / "ckpt"
    shutil.copytree(base, ckpt)

    def add_lm_head(t: dict[str, np.ndarray]) -> None:
        t["lm_head.weight"] = t["model.language_model.embed_tokens.weight"].copy()

    _tensors(add_lm_head)(ckpt)
    with caplog.at_level("WARNING"):
        result = convert_checkpoint(ckpt, tmp_path / "out", "f16")
    assert "stores lm_head.weight; not written" in caplog.text
    assert "output.weight" not in {t.name for t in GGUFReader(result.text_path).tensors}
    plain = convert_checkpoint(base, tmp_path / "plain", "f16")
    assert result.fingerprint != plain.fingerprint  # the extra tensor is part of the source


_MEASURE = textwrap.dedent("""
    import json, sys
    from edgevlm.convert import convert_checkpoint
    from edgevlm.convert.pipeline import peak_rss_mb
    before = peak_rss_mb()
    result = convert_checkpoint(sys.argv[1], sys.argv[2], sys.argv[3])
    print(json.dumps({"before_mb": before, "peak_mb": peak_rss_mb(),
                      "torch": "torch" in sys.modules,
                      "bytes": result.text_bytes + result.vision_bytes}))
""")


@pytest.mark.parametrize(("text_type", "least_ratio"), [("q8_0", 0.25), ("q4_k_m", 0.2)])
def test_streaming_keeps_peak_memory_far_below_the_checkpoint(
        tmp_path: Path, tok: Tokenizer, text_type: str, least_ratio: float) -> None:
    """A ~110 MB float32 checkpoint converts to Q8_0 (gguf's quantiser) or the Q4_K_M mix
    (the core's quantisers) with a peak RSS increase of a small fraction of its size (row
    blocks, pages handed back), and without importing torch. Measured with VmHWM in a fresh
    process (ru_maxrss would report pytest's peak)."""
    config = legacy_config_dict(
        tok, vocab_rows=12288,
        text={"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
              "rope_scaling": {"mrope_section": [16, 8, 8], "mrope_interleaved": True,
                               "rope_type": "default"}},
        vision={"hidden_size": 256, "intermediate_size": 1024, "depth": 4,
                "deepstack_visual_indexes": [1, 2], "num_position_embeddings": 2304})
    size = write_numpy_checkpoint(tmp_path / "big", tok, config)
    assert size > 100e6
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(tmp_path / "big"),
                           str(tmp_path / "out"), text_type], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    grown = (stats["peak_mb"] - stats["before_mb"]) * 2**20
    print(f"{text_type}: checkpoint {size / 1e6:.0f} MB, peak RSS {stats['peak_mb']:.0f} MB, "
          f"grew {grown / 1e6:.1f} MB while converting, wrote {stats['bytes'] / 1e6:.1f} MB")
    assert grown < size / 5
    assert not stats["torch"]
    # it did write the whole model (measured: 0.35 × the f32 bytes with q8_0, 0.29 with
    # q4_k_m, whose vision tower stays F16)
    assert stats["bytes"] > size * least_ratio


def test_the_cli_offers_the_converter_types() -> None:
    """The parser's --type/--vision-type choices (written out so `edgevlm --help` needs no
    gguf package) are the converter's type table."""
    from edgevlm.convert import cli, pipeline

    assert cli.TEXT_TYPES == pipeline.TEXT_TYPES
    assert cli.VISION_TYPES == pipeline.VISION_TYPES
