"""Structured answers: a request's JSON schema (or regex) as a grammar the decoding follows.

A request with ``schema`` (MQTT; OpenAI's ``response_format``, Ollama's ``format`` over HTTP)
or ``regex`` is compiled once at admission (:func:`compile_grammar`: an unsupported schema
feature is a 400 naming it, before any media is decoded) into an llguidance grammar. On the
worker, :class:`TokenConstraint` masks the logits before each sampling step — only tokens
that keep the answer inside the grammar can be drawn — and follows each token drawn, so the
answer always parses and validates.

Why llguidance (https://github.com/guidance-ai/llguidance): the constrained-decoding engine
llama.cpp and vLLM use; a ~3 MB Rust wheel with no dependencies (no torch), abi3 wheels for
x86-64 and aarch64, JSON schema, regex and Lark grammars, and a token mask computed in tens of
microseconds from the tokenizer's own ``tokenizer.json``. It is imported on the first request
that asks for structure.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .wire.errors import InvalidRequest

# A schema's JSON text above this is refused (compiling is on the network thread).
MAX_SCHEMA_BYTES = 64 * 1024
ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}
# One layout of JSON, "{"a": 1, "b": [2, 3]}": with free whitespace a small model may spend
# its whole max_tokens on newlines after "{" (the grammar allows them), never closing it.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class Grammar:
    """A compiled grammar (llguidance's serialised form) and what it came from."""

    kind: str            # json_schema | regex
    text: str            # the llguidance grammar

    @property
    def is_json(self) -> bool:
        return self.kind == "json_schema"


def compile_grammar(schema: Any = None, regex: str | None = None) -> Grammar | None:
    """The grammar of a request's ``schema`` or ``regex`` (None: free text); InvalidRequest
    naming what llguidance cannot honour."""
    if schema is None and regex is None:
        return None
    if schema is not None and regex is not None:
        raise InvalidRequest("send schema or regex, not both")
    import llguidance

    if schema is not None:
        if schema is True or schema == {}:
            schema = ANY_JSON_OBJECT
        if not isinstance(schema, dict):
            raise InvalidRequest("schema must be a JSON schema object (or true: any JSON "
                                 "object)")
        size = len(json.dumps(schema))
        if size > MAX_SCHEMA_BYTES:
            raise InvalidRequest(f"schema is {size} bytes of JSON, the limit is "
                                 f"{MAX_SCHEMA_BYTES}; send a smaller schema")
        try:
            text = llguidance.LLMatcher.grammar_from_json_schema(
                schema, overrides=JSON_LAYOUT)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            raise InvalidRequest(f"schema is not supported: {exc}") from None
        grammar = Grammar("json_schema", text)
    else:
        assert regex is not None
        grammar = Grammar("regex", llguidance.LLMatcher.grammar_from_regex(regex))
    problem = llguidance.LLMatcher.validate_grammar(grammar.text)
    if problem:
        raise InvalidRequest(f"{'schema' if grammar.is_json else 'regex'} is not supported: "
                             f"{problem.strip()[:500]}")
    return grammar


_TOKENIZERS: dict[int, Any] = {}  # id(tokenizers.Tokenizer) -> llguidance.LLTokenizer
_TOKENIZERS_LOCK = threading.Lock()


def _ll_tokenizer(tokenizer: Any, eos: frozenset[int]) -> Any:
    """The llguidance tokenizer of a model's ``tokenizers.Tokenizer``, made once (its token
    table takes ~1 s for a 151k vocabulary) and kept with the tokenizer."""
    import llguidance

    with _TOKENIZERS_LOCK:
        found = _TOKENIZERS.get(id(tokenizer))
        if found is None or found[0] is not tokenizer:
            found = (tokenizer, llguidance.LLTokenizer(tokenizer.to_str(),
                                                       eos_token=sorted(eos)))
            _TOKENIZERS[id(tokenizer)] = found
        return found[1]


class TokenConstraint:
    """One answer's grammar state: :meth:`mask` the logits, :meth:`accept` each token."""

    def __init__(self, grammar: Grammar, tokenizer: Any, eos: frozenset[int]) -> None:
        import llguidance
        import llguidance.numpy as llnp

        self._llnp = llnp
        ll_tokenizer = _ll_tokenizer(tokenizer, eos)
        self._matcher = llguidance.LLMatcher(ll_tokenizer, grammar.text, log_level=0)
        self._vocab = ll_tokenizer.vocab_size
        self._bitmask = llnp.allocate_token_bitmask(1, self._vocab)

    def mask(self, logits: npt.NDArray[np.float32]) -> None:
        """Set the logits of every token the grammar does not allow now to -inf (in place;
        the model's logits beyond the tokenizer's vocabulary are never allowed)."""
        self._llnp.fill_next_token_bitmask(self._matcher, self._bitmask, 0)
        view = logits.reshape(1, -1)
        if view.shape[1] > self._vocab:
            view[:, self._vocab:] = -np.inf
        self._llnp.apply_token_bitmask_inplace(view[:, :self._vocab], self._bitmask)

    def accept(self, token: int) -> None:
        self._matcher.consume_token(token)

    def forced(self) -> list[int]:
        """The tokens the grammar forces from here (the key of ``{"count": …}``, the ``{``):
        the tokenizer's own tokenization of the forced text, which is what a model has seen
        (llguidance's fast-forward tokens). Sampled from the mask instead, a key comes out in
        whatever pieces the model happens to rank first — on a random full-vocabulary model
        rarely the tokenizer's — and each forced token would cost a mask computation."""
        return list(self._matcher.compute_ff_tokens())

    @property
    def done(self) -> bool:
        """The grammar is complete and allows nothing more."""
        return bool(self._matcher.is_stopped())


def parsed(grammar: Grammar | None, text: str) -> Any:
    """The JSON value of a schema answer (None for free text or regex answers, or a JSON
    answer cut short by max_tokens)."""
    if grammar is None or not grammar.is_json:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
