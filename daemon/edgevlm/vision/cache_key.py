"""The cache key of a media item's vision features.

Keys are BLAKE2b-128 over a domain/version tag, the model fingerprint, the preprocessing
parameters (family, min/max pixels) and the raw media bytes, each field length-prefixed so no
two different inputs serialize alike (for a clip every frame is length-prefixed, so moving a
frame boundary changes the key). Why not the seed's 128-bit FNV-1a: FNV is a fast checksum
without collision resistance (its multiply-xor steps can be solved for two inputs with one
key), and a colliding key serves one client the features of another client's image. That
failure is published: vLLM's multimodal hasher let different images share a cache key and so
a cached result (PYSEC-2025-43 / CVE-2025-46722 / GHSA-c65p-x677-fgj6; there the serialization
left out the image size, the other half of what this key gets right). BLAKE2b is a
cryptographic hash at several hundred MB/s in hashlib; 128 bits fit ``image_ref``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["cache_key"]

KEY_TAG = b"edgevlm/vision-cache/v1\0"


def cache_key(model_fingerprint: str, family: str, min_pixels: int, max_pixels: int,
              media: bytes | Sequence[bytes]) -> str:
    """32 hex digits naming the features of ``media`` under this model and preprocessing.

    ``media`` is one image's raw (still encoded) bytes, or a clip's frames; a one-frame clip
    and the same single image get different keys (they are preprocessed differently).
    """
    h = hashlib.blake2b(KEY_TAG, digest_size=16)
    for text in (model_fingerprint, family):
        _update_framed(h, text.encode("utf-8"))
    for value in (min_pixels, max_pixels):
        if not 0 <= value < 2**64:
            raise ValueError(f"pixel bounds must be in 0..2**64-1, got {value}")
        h.update(value.to_bytes(8, "little"))
    if isinstance(media, bytes | bytearray | memoryview):
        h.update(b"I")
        _update_framed(h, media)
    else:
        h.update(b"V" + len(media).to_bytes(8, "little"))
        for frame in media:
            _update_framed(h, frame)
    return h.hexdigest()


def _update_framed(h: hashlib.blake2b, data: bytes | bytearray | memoryview) -> None:
    h.update(memoryview(data).nbytes.to_bytes(8, "little"))
    h.update(data)
