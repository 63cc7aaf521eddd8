"""Issue 21: the journal of Frigate events accepted but not yet given their record."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from edgevlm.sources import event_journal
from edgevlm.sources.event_journal import JOURNAL_FILE, EventJournal, JournaledEvent, read_journal


def event(i: int, camera: str = "cam0") -> JournaledEvent:
    return JournaledEvent(f"ev{i}", camera, "person", 1.0, 2.0, 1.5)


def test_open_events_survive_a_restart_and_done_ones_do_not(tmp_path: Path) -> None:
    journal = EventJournal(tmp_path)
    for i in range(3):
        journal.add(event(i))
    journal.add(event(0))  # a second message of the same event: journaled once
    journal.done("ev1")
    journal.done("unknown")
    assert journal.flush()
    journal.stop()  # no done lines for the others: as after a SIGKILL
    again = EventJournal(tmp_path)
    assert again.recovered == [event(0), event(2)]
    assert again.open_ids() == ["ev0", "ev2"]
    again.stop()


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / JOURNAL_FILE
    line = json.dumps(event(1).line())
    path.write_text(json.dumps(event(0).line()) + "\n" + line[: len(line) // 2])
    with caplog.at_level(logging.WARNING):
        assert read_journal(path) == [event(0)]
    assert "torn" in caplog.text


@pytest.mark.parametrize("content", [
    b"\x00\xff\xfe garbage\n",
    b"[1, 2, 3]\n\"text\"\n{}\n",
    b'{"op": "add", "id": 5, "camera": "cam0"}\n',
    b'{"op": "add", "id": "x", "camera": "' + b"c" * 500 + b'"}\n',
    b'{"op": "add", "id": "x", "camera": "cam0", "start_time": "soon"}\n',
    b'{"op": "delete", "id": "x"}\n',
    b"[" * 100_000 + b"\n",
])
def test_a_corrupt_or_hostile_file_is_skipped_and_the_good_lines_kept(
        tmp_path: Path, content: bytes) -> None:
    path = tmp_path / JOURNAL_FILE
    path.write_bytes(json.dumps(event(7).line()).encode() + b"\n" + content
                     + json.dumps(event(8).line()).encode() + b"\n")
    journal = EventJournal(tmp_path)
    assert journal.recovered == [event(7), event(8)]
    journal.stop()


def test_an_unreadable_journal_never_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).mkdir()  # a directory where the file should be
    journal = EventJournal(tmp_path)
    assert journal.recovered == []
    journal.add(event(1))  # not written: logged, never raised
    assert journal.flush()
    journal.stop()


def test_the_file_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_journal, "MAX_BYTES", 2000)
    journal = EventJournal(tmp_path)
    for i in range(500):
        journal.add(event(i))
        journal.done(f"ev{i}" if i != 250 else None)
        if i % 10 == 0:
            assert journal.flush()
    assert journal.flush()
    journal.stop()
    assert (tmp_path / JOURNAL_FILE).stat().st_size < 4000
    assert [e.id for e in read_journal(tmp_path / JOURNAL_FILE)] == ["ev250"]


def test_at_most_max_open_events_are_journaled(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_journal, "MAX_OPEN", 5)
    journal = EventJournal(tmp_path)
    for i in range(8):
        journal.add(event(i))
    assert journal.open_ids() == [f"ev{i}" for i in range(5)]
    journal.stop()


def test_without_cache_dir_nothing_is_written(tmp_path: Path) -> None:
    journal = EventJournal(None)
    journal.add(event(1))
    journal.done("ev1")
    assert not journal.enabled and journal.recovered == []
    journal.stop()
