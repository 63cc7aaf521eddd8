"""The one context check: does a prompt of ``text`` + ``vision`` tokens leave room for
``max_tokens`` in the model's context? Admission runs it on the token budget (on a long
text's fewest tokens first), the worker on a text too long to count at admission,
``Engine.generate`` on the prompt it assembled; a request meets it once with its exact count.
"""

from __future__ import annotations

from .errors import ContextLengthExceeded


def check_context(text: int, vision: int, max_tokens: int, context: int, items: str = "none",
                  *, text_lower_bound: tuple[int, int | None] | None = None) -> None:
    """``context_length_exceeded`` naming every number when ``text + vision + max_tokens``
    is over ``context``; ``items`` lists the media items' tokens ("<path> <tokens>, ...").

    ``text_lower_bound``: ``text`` is only the fewest tokens the message text can be, from
    its (bytes, the most bytes of one token): the message says so."""
    prompt = text + vision
    total = prompt + max_tokens
    if total <= context:
        return
    if text_lower_bound is not None:
        message_bytes, token_bytes = text_lower_bound
        raise ContextLengthExceeded(
            f"the text is too long: {message_bytes} bytes of message text are at least {text} "
            f"tokens with the template (a token of this model is at most {token_bytes} "
            f"bytes); + vision {vision} ({items}) + max_tokens {max_tokens} = {total}, the "
            f"context is {context} (model.context); send less text or a lower max_tokens")
    raise ContextLengthExceeded(
        f"prompt is {prompt} tokens (text {text}, vision {vision}: {items}) + max_tokens "
        f"{max_tokens} = {total}, the context is {context} (model.context); send smaller "
        "images (mm_processor_kwargs.max_pixels), fewer items, or a lower max_tokens")
