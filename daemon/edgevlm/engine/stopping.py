"""Stop rules of a generation: the model's EOS ids and the request's stop strings, with
incremental detokenisation that never emits half a UTF-8 character or part of a stop string."""

from __future__ import annotations

from collections.abc import Sequence

from ..tokenizer import HFTokenizer


class StopChecker:
    """Feed generated tokens one by one; it tracks the text and says when to stop."""

    def __init__(self, tokenizer: HFTokenizer, eos: frozenset[int], stop: Sequence[str]) -> None:
        self._tok = tokenizer
        self._eos = eos
        self._stop = [s for s in stop if s]
        self.tokens: list[int] = []
        self.text = ""
        self._emitted = 0
        self.finished = False

    def feed(self, token: int) -> str:
        """Adds a token; returns the newly safe text (possibly empty). Sets ``finished`` on an
        EOS token or a stop string (the stop string and what follows are not part of text)."""
        if token in self._eos:
            self.finished = True
            return self._flush()
        self.tokens.append(token)
        self.text = self._tok.decode(self.tokens, skip_special_tokens=True)
        cut = min((i for i in (self.text.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            self.finished = True
            return self._flush()
        safe = len(self.text.rstrip("\ufffd"))
        for s in self._stop:          # hold back a suffix that may grow into a stop string
            for k in range(min(len(s) - 1, safe), 0, -1):
                if self.text[safe - k:safe] == s[:k]:
                    safe -= k
                    break
        if safe <= self._emitted:
            return ""
        chunk = self.text[self._emitted:safe]
        self._emitted = safe
        return chunk

    def _flush(self) -> str:
        chunk = self.text[self._emitted:]
        self._emitted = len(self.text)
        return chunk
