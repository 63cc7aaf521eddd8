"""The request-side commands: tokens, schema, demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgevlm.cli import main
from tests.helpers import image_bytes


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_tokens_for_a_size_prints_the_seed_table_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_json(capsys, "tokens", "--size", "3333x2500") == {
        "width": 3333, "height": 2500, "resized_width": 3328, "resized_height": 2496,
        "grid": [1, 156, 208], "tokens": 8112, "tokens_with_markers": 8114}
    out = run_json(capsys, "tokens", "--family", "qwen2.5-vl", "--size", "3333x2500")
    assert out["tokens"] == 1230 and (out["resized_width"], out["resized_height"]) == (1148, 840)  # type: ignore[index]


def test_tokens_of_image_files_read_headers(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.jpg", tmp_path / "b.png"
    a.write_bytes(image_bytes(1280, 720))
    b.write_bytes(image_bytes(100, 100, "PNG"))
    out = run_json(capsys, "tokens", str(a), str(b), "--max-pixels", "1003520")
    assert isinstance(out, list)
    assert [(o["file"], o["tokens"]) for o in out] == [(str(a), 880), (str(b), 64)]


def test_tokens_errors_have_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    assert main(["tokens", str(bad)]) == 1
    assert "bad.jpg" in capsys.readouterr().err
    assert main(["tokens", "--family", "llava", "--size", "10x10"]) == 2
    assert main(["tokens"]) == 2
    with pytest.raises(SystemExit) as info:
        main(["tokens", "--size", "12by4"])
    assert info.value.code == 2


def test_schema_command_matches_the_committed_copy(capsys: pytest.CaptureFixture[str]) -> None:
    committed = Path(__file__).parents[2] / "daemon" / "edgevlm" / "schema" / "protocol-v1.json"
    assert run_json(capsys, "schema") == json.loads(committed.read_text())


def test_demo_runs_every_sample_and_reports_each_outcome() -> None:
    proc = subprocess.run([sys.executable, "-m", "edgevlm", "demo", "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    outcome = {line["sample"]: line.get("error", {}).get("type", line["status"])
               for line in lines}
    assert outcome["front door, 1280x720 JPEG"] == "admitted"
    assert outcome["vision_tokens n=4 d=2048 ds=3"] == "admitted"
    assert outcome["5 images (limit 4)"] == "mm_limit_exceeded"
    assert outcome["truncated JPEG"] == "unsupported_media"
    assert outcome["3333x2500 with max_tokens 4000"] == "context_length_exceeded"
    assert outcome["not JSON"] == "invalid_request"
    assert len(lines) == 12
