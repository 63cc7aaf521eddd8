"""A native session: the KV cache and scratch of one model, driven one call at a time."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..core.native import c_string, ffi, lib, load_error, raise_for_status
from ..vision.preprocess import PixelInput
from ..wire.features import VisionFeatures
from .model import NativeModel
from .prompt import PromptInputs

F32 = npt.NDArray[np.float32]


def _ptr(ctype: str, array: npt.NDArray[Any] | None) -> Any:
    return ffi.NULL if array is None else ffi.cast(ctype, ffi.from_buffer(array))


def _kernel_mode(mode: str) -> int:
    """The edgevlm_kernel_mode of ``best``, ``fast`` or ``scalar``."""
    modes = {"best": lib.EDGEVLM_KERNELS_BEST, "fast": lib.EDGEVLM_KERNELS_FAST,
             "scalar": lib.EDGEVLM_KERNELS_SCALAR}
    if mode not in modes:
        raise ValueError(f"unknown kernel mode {mode!r}; use one of {', '.join(modes)}")
    return int(modes[mode])


class NativeSession:
    """Owns an ``edgevlm_session*``. Not thread-safe except :meth:`cancel`."""

    def __init__(self, model: NativeModel, n_ctx: int, n_threads: int, n_batch: int = 256,
                 kv_type: str = "f32", max_patches: int = 0) -> None:
        self.model = model
        params = ffi.new("edgevlm_session_params *")
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_threads = n_threads
        params.kv_type = lib.EDGEVLM_KV_F16 if kv_type == "f16" else lib.EDGEVLM_KV_F32
        params.max_patches = max_patches if model.info["has_vision"] else 0
        self.max_patches = params.max_patches
        out = ffi.new("edgevlm_session **")
        err = ffi.new("char[512]")
        status = lib.edgevlm_session_new(model.handle, params, out, err, 512)
        if status != lib.EDGEVLM_OK:
            raise load_error(status, c_string(err))
        self.handle = ffi.gc(out[0], lib.edgevlm_session_free)
        self.n_ctx = n_ctx
        self.n_vocab = int(model.info["n_vocab"])
        self.n_embd = int(model.info["n_embd"])
        self.n_deepstack = int(model.info["n_deepstack"])
        self._sampling = ffi.new("edgevlm_sampling *")  # reused: nothing allocated per token
        self._token = ffi.new("int32_t *")

    def _check(self, status: int) -> None:
        if status != lib.EDGEVLM_OK:
            raise_for_status(status, c_string(lib.edgevlm_session_error(self.handle)))

    def cancel(self) -> None:
        lib.edgevlm_session_cancel(self.handle)

    def reset(self) -> None:
        lib.edgevlm_session_reset(self.handle)

    def set_seed(self, seed: int) -> None:
        lib.edgevlm_session_set_seed(self.handle, seed & (2**64 - 1))

    def use_kernels(self, mode: str) -> None:
        """``best`` (full precision, the default), ``fast`` (prefill and the ViT round their
        activations as llama.cpp does, and decode rounds them to f16/bf16 for F16/BF16
        weights, where that is faster on this CPU) or ``scalar`` (the reference kernels, for
        tests)."""
        self._check(lib.edgevlm_session_set_kernels(self.handle, _kernel_mode(mode)))

    @staticmethod
    def kernels_name(mode: str) -> str:
        """The kernel set ``mode`` selects on this CPU (``fast`` names the ``best`` set where
        the CPU has no faster rounding)."""
        return c_string(lib.edgevlm_kernels_name(_kernel_mode(mode)))

    def use_scalar_kernels(self, scalar: bool) -> None:
        self.use_kernels("scalar" if scalar else "best")

    def encode_vision(self, pixels: PixelInput, with_vit_output: bool = False
                      ) -> tuple[VisionFeatures, F32 | None]:
        """ViT + mergers for one image or video; videos are encoded one temporal group at a
        time (groups never attend to each other), so max_patches bounds one frame pair."""
        gt, gh, gw = pixels.grid_thw
        per_group = gh * gw
        n_merged = per_group // 4
        values = np.ascontiguousarray(pixels.pixel_values, dtype=np.float32)
        embeds = np.empty((gt * n_merged, self.n_embd), dtype=np.float32)
        ds = (np.empty((self.n_deepstack, gt * n_merged, self.n_embd), dtype=np.float32)
              if self.n_deepstack else None)
        vit = (np.empty((gt * per_group, int(self.model.info["v_n_embd"])), dtype=np.float32)
               if with_vit_output else None)
        group_ds = (np.empty((self.n_deepstack, n_merged, self.n_embd), dtype=np.float32)
                    if ds is not None else None)
        for g in range(gt):
            rows = slice(g * n_merged, (g + 1) * n_merged)
            self._check(lib.edgevlm_encode_vision(
                self.handle, _ptr("float *", values[g * per_group:(g + 1) * per_group]),
                per_group, 1, gh, gw, _ptr("float *", embeds[rows]),
                _ptr("float *", group_ds),
                _ptr("float *", vit[g * per_group:(g + 1) * per_group] if vit is not None
                     else None)))
            if ds is not None and group_ds is not None:
                ds[:, rows] = group_ds
        features = VisionFeatures(embeds, ds, (gt, gh // 2, gw // 2))
        return features, vit

    def prefill(self, prompt: PromptInputs, n_logits: int = 1) -> F32:
        """Runs the prompt through the decoder; returns the logits of its last n_logits tokens."""
        n = len(prompt.tokens)
        logits = np.empty((n_logits, self.n_vocab), dtype=np.float32)
        ds = prompt.deepstack_rows
        self._check(lib.edgevlm_prefill(
            self.handle, _ptr("int32_t *", prompt.tokens), n, _ptr("int32_t *", prompt.positions),
            _ptr("int32_t *", prompt.vision_index),
            _ptr("float *", prompt.vision_rows if prompt.n_vision else None), prompt.n_vision,
            _ptr("float *", ds), 0 if ds is None else ds.shape[0], _ptr("float *", logits),
            n_logits))
        return logits

    @property
    def n_past(self) -> int:
        """Tokens in the KV cache."""
        return int(lib.edgevlm_session_n_past(self.handle))

    def rollback(self, n_past: int) -> None:
        """Forget the cached tokens from ``n_past`` on (a prompt's state kept for the next
        continuation)."""
        self._check(lib.edgevlm_session_rollback(self.handle, n_past))

    def append_text(self, tokens: npt.NDArray[np.int32], first_position: int) -> F32:
        """Text tokens after what the cache holds, at MRoPE positions ``first_position`` on
        (all three axes alike); returns the logits after each of them ``[n, vocab]``."""
        n = len(tokens)
        ids = np.ascontiguousarray(tokens, dtype=np.int32)
        positions = np.ascontiguousarray(
            np.broadcast_to(np.arange(first_position, first_position + n, dtype=np.int32),
                            (3, n)))
        logits = np.empty((n, self.n_vocab), dtype=np.float32)
        self._check(lib.edgevlm_prefill(
            self.handle, _ptr("int32_t *", ids), n, _ptr("int32_t *", positions), ffi.NULL,
            ffi.NULL, 0, ffi.NULL, 0, _ptr("float *", logits), n))
        return logits

    def decode(self, token: int, position: int, logits: F32) -> None:
        self._check(lib.edgevlm_decode(self.handle, token, position, _ptr("float *", logits)))

    def sample(self, logits: F32, temperature: float, top_k: int, top_p: float,
               repetition_penalty: float, history: npt.NDArray[np.int32]) -> int:
        params = self._sampling
        params.temperature = temperature
        params.top_k = top_k
        params.top_p = top_p
        params.repetition_penalty = repetition_penalty
        self._check(lib.edgevlm_sample(self.handle, _ptr("float *", logits), params,
                                       _ptr("int32_t *", history if len(history) else None),
                                       len(history), self._token))
        return int(self._token[0])
