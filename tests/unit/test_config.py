"""The YAML configuration: defaults, sizes, and errors that name key, value and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgevlm.cli import main
from edgevlm.config import ConfigError, load_config

REPO = Path(__file__).parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "edgevlm.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_empty_file_gives_the_documented_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""))
    assert config.model.family == "qwen3-vl" and config.model.max_pixels == 1_003_520
    assert config.limits.limit_mm_per_prompt.to_json() == {"image": 4, "video": 1}
    assert config.cache.max_bytes == 512 * 2**20
    assert config.media.policy().formats == frozenset({"JPEG", "PNG", "WEBP", "BMP"})


def test_example_config_in_etc_is_valid() -> None:
    load_config(REPO / "etc" / "edgevlm.yaml")


def test_sizes_with_units_and_limits_as_json_string(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, """
cache:
  max_bytes: 64 MiB
limits:
  max_part_bytes: 2MB
  limit_mm_per_prompt: '{"image": 2, "video": {"count": 1, "num_frames": 8}}'
"""))
    assert config.cache.max_bytes == 64 * 2**20
    assert config.limits.max_part_bytes == 2_000_000
    limits = config.limits.request_limits()
    assert limits.mm.count_limit("image") == 2 and limits.mm.limit("video").num_frames == 8  # type: ignore[union-attr]


def test_every_error_is_listed_with_key_value_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, """model:
  threads: 0
  family: qwen9
limits:
  limit_mm_per_prompt:
    imagez: 3
  max_queue: -1
cache:
  max_bytes: lots
colour: red
""")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = info.value.problems
    assert "model.threads = 0 (line 2): Input should be greater than or equal to 1" in problems
    assert ("model.family = 'qwen9' (line 3): unknown family 'qwen9'; use one of qwen3-vl, "
            "qwen2-vl, qwen2.5-vl") in problems
    assert any(p.startswith("limits.limit_mm_per_prompt = {'imagez': 3} (line 5): unknown "
                            "modality 'imagez'; valid modalities are image, video, audio")
               for p in problems)
    assert "limits.max_queue = -1 (line 7): Input should be greater than or equal to 1" in problems
    assert any(p.startswith("cache.max_bytes = 'lots' (line 9): not a size") for p in problems)
    assert ("colour = 'red' (line 10): unknown key; check the spelling against "
            "etc/edgevlm.yaml") in problems
    assert len(problems) == 6


def test_yaml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "model: [unclosed\n"))


def test_check_config_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    assert main(["check-config", str(write(tmp_path, "model:\n  threads: 2\n"))]) == 0
    assert main(["check-config", str(write(tmp_path, "model:\n  threads: -2\n"))]) == 2
    assert "model.threads = -2 (line 2)" in capsys.readouterr().err
