"""Giving freed heap back to the system.

Loading a model builds large short-lived Python objects (the tokenizer's JSON, its
vocabulary); once freed, glibc's allocator keeps their pages in the process (they count in
the RSS a board owner reads) until ``malloc_trim`` returns them. Elsewhere (musl, macOS)
there is no such call and nothing to do.
"""

from __future__ import annotations

import ctypes
import gc


def return_freed_memory() -> None:
    """Collect garbage, then return the allocator's free pages to the system (glibc)."""
    gc.collect()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)
