"""Vision features as the LLM consumes them: the one type shared by the ``vision_tokens``
decoder, the vision-feature cache and (later) the engine.

An instance is immutable in both senses: the dataclass is frozen and its arrays are read-only
views, so a cache entry handed to one request cannot be altered for the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class VisionFeatures:
    """The rows a vision encoder hands to the LLM for one image or clip.

    ``embeddings``: float32 [n, d], C-contiguous; the main vision rows.
    ``deepstack``:  float32 [k, n, d], C-contiguous, k >= 1; or None (no DeepStack injection).
    ``grid``:       the merged grid (gt, gh, gw) with n = gt * gh * gw.

    Equality is identity (``eq=False``): comparing arrays element-wise is never what a dict or
    a cache wants. Shapes are checked here; values are checked by whoever builds one.
    """

    embeddings: FloatArray
    deepstack: FloatArray | None
    grid: tuple[int, int, int]

    def __post_init__(self) -> None:
        if len(self.grid) != 3 or any(int(g) < 1 for g in self.grid):
            raise ValueError(f"grid must be three integers >= 1, got {self.grid!r}")
        n = self.grid[0] * self.grid[1] * self.grid[2]
        emb = self.embeddings
        _check_array("embeddings", emb, 2)
        if emb.shape[0] != n or emb.shape[1] < 1:
            raise ValueError(f"embeddings shape {emb.shape} does not fit grid {list(self.grid)} "
                             f"(want [{n}, d >= 1])")
        object.__setattr__(self, "embeddings", _read_only_view(emb))
        ds = self.deepstack
        if ds is not None:
            _check_array("deepstack", ds, 3)
            if ds.shape[0] < 1 or ds.shape[1:] != emb.shape:
                raise ValueError(f"deepstack shape {ds.shape} does not fit embeddings "
                                 f"{emb.shape} (want [k >= 1, {emb.shape[0]}, {emb.shape[1]}])")
            object.__setattr__(self, "deepstack", _read_only_view(ds))

    @property
    def n_tokens(self) -> int:
        """Vision tokens (rows) the LLM sees."""
        return int(self.embeddings.shape[0])

    @property
    def hidden_size(self) -> int:
        """The LLM hidden size d of every row."""
        return int(self.embeddings.shape[1])

    @property
    def has_deepstack(self) -> bool:
        return self.deepstack is not None

    @property
    def deepstack_layers(self) -> int:
        """k, the DeepStack feature sets per row (0 without DeepStack)."""
        return 0 if self.deepstack is None else int(self.deepstack.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (what a cache entry costs)."""
        return int(self.embeddings.nbytes) + (0 if self.deepstack is None
                                              else int(self.deepstack.nbytes))


def _check_array(name: str, array: object, ndim: int) -> None:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(array).__name__}")
    if array.dtype != np.float32 or array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D native float32 array, got {array.ndim}-D "
                         f"{array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (np.ascontiguousarray)")


def _read_only_view(array: FloatArray) -> FloatArray:
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view
