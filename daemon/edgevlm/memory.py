"""glibc malloc settings for a daemon that turns camera frames into float32 patches.

Every image passes through a few large buffers: the decoded picture (Pillow keeps RGB as 4
bytes a pixel: 8 MB for 1448x1448), the resize's two passes (10 MB) and the patches (24 MB
of float32). glibc's defaults serve the first of each from ``mmap`` and then raise the mmap
threshold to that size, so later ones come from the heap, which keeps what it frees: after a
decode the heap holds ~19 MB the patches (from ``mmap`` again) cannot use, and one image needs
~49 MB more than the idle daemon. With the heap serving every buffer up to 32 MiB and not
trimmed below 128 MiB, the phases reuse each other's memory: ~40 MB, without the page faults
that returning memory to the kernel after each image would cost (~20 ms a frame here).
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1   # <malloc.h>
M_MMAP_THRESHOLD = -3
HEAP_UP_TO = 32 << 20    # the largest buffer served from the heap (glibc's own upper bound)
TRIM_ABOVE = 128 << 20   # free memory at the heap's top kept before it is given back


def reuse_image_buffers() -> bool:
    """Apply the settings above; ``False`` where the C library is not glibc (nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = bool(mallopt(M_MMAP_THRESHOLD, HEAP_UP_TO)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                     TRIM_ABOVE))
    if not ok:
        log.debug("mallopt refused the malloc settings; keeping the C library's defaults")
    return ok
