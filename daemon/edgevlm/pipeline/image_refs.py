"""``image_ref`` capabilities: a vision-cache entry is reused only by whoever it was given to.

An answer's ``cache[].key`` is ``<cache key><tag>``, 64 hex digits: the vision-cache key and a
128-bit keyed BLAKE2b MAC over it and the *requester* — the reply tree the answer went to
(``<mqtt.reply_prefix><first level>``, e.g. ``edgevlm/clients/alice``, which the broker's ACL
lets only that client read), or the node's default response topic for requests without a
Response Topic. A request's ``image_ref`` is checked against its own requester before anything
is looked up: a reference given to another requester, made before the daemon restarted (the
secret is drawn per process) or a bare 32-digit cache key finds nothing (``cache_miss``, and
the client sends the bytes again). Whoever sends a request with someone else's reference and
that someone's reply route gets nothing: the answer goes to the route, which it cannot read.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re

TAG_BYTES = 16
_REF = re.compile(r"\A([0-9a-f]{32})([0-9a-f]{32})\Z")


class ImageRefs:
    """Issues and opens ``image_ref`` capabilities with one secret."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else os.urandom(32)

    def _tag(self, cache_key: str, requester: str) -> str:
        mac = hashlib.blake2b(cache_key.encode() + b"\0" + requester.encode(),
                              key=self._secret, digest_size=TAG_BYTES)
        return mac.hexdigest()

    def issue(self, cache_key: str, requester: str) -> str:
        """The reference to ``cache_key`` that only ``requester`` may use."""
        return cache_key + self._tag(cache_key, requester)

    def open(self, ref: str, requester: str | None) -> str | None:
        """The cache key of ``ref`` if it was issued to ``requester``, else None."""
        match = _REF.match(ref)
        if match is None or requester is None:
            return None
        key, tag = match.groups()
        return key if hmac.compare_digest(tag, self._tag(key, requester)) else None


PROCESS_REFS = ImageRefs()   # the daemon's: one secret per process
