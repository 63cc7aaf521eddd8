"""The key/value metadata of the two GGUF files, as llama.cpp's converter writes it for
Qwen3-VL (``conversion/qwen3vl.py``, ``conversion/base.py``, ``gguf.SpecialVocab``,
``gguf.Metadata``), plus ``edgevlm.*`` keys for what edgevlm needs and llama.cpp does not store.

Value types follow llama.cpp's ``GGUFWriter.add_*`` helpers (counts uint32, epsilons and
thetas float32, ``general.sampling.top_k`` int32, arrays of Python ints int32). A reader must
not require any ``edgevlm.*`` key: files written by llama.cpp lack them.
"""

from __future__ import annotations

from gguf import GGUFWriter

from .. import __version__
from .errors import ConvertInputError
from .gguf_stream import string_placeholder
from .hf_config import GenerationParams, ModelConfig, ProcessorParams
from .vocab import GgmlVocab

TEXT_ARCH = "qwen3vl"
VISION_ARCH = "clip"
PROJECTOR_TYPE = "qwen3vl_merger"
GGML_QUANT_VERSION = 2

# edgevlm's own keys (everything a reader may default when absent).
FINGERPRINT_KEY = "edgevlm.fingerprint"
CONVERTER_KEY = "edgevlm.converter"
TEXT_EDGEVLM_KEYS = ("edgevlm.image_token_id", "edgevlm.video_token_id",
                     "edgevlm.vision_start_token_id", "edgevlm.vision_end_token_id",
                     "edgevlm.eos_token_ids", "tokenizer.huggingface.json")
VISION_EDGEVLM_KEYS = ("edgevlm.vision.temporal_patch_size", "edgevlm.vision.rope_theta",
                       "edgevlm.vision.min_pixels", "edgevlm.vision.max_pixels",
                       "edgevlm.video.min_pixels", "edgevlm.video.max_pixels")
_SPECIAL_ID_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
                    "unk": "tokenizer.ggml.unknown_token_id",
                    "sep": "tokenizer.ggml.seperator_token_id",
                    "pad": "tokenizer.ggml.padding_token_id",
                    "cls": "tokenizer.ggml.cls_token_id", "mask": "tokenizer.ggml.mask_token_id"}


def size_label(n_params: int) -> str:
    """llama.cpp's ``general.size_label`` (``gguf.utility.model_weight_count_rounded_notation``
    with two significant digits): 2127532032 → "2.1B", 443712 → "444K"."""
    scale, suffix = next(((s, x) for s, x in ((1e12, "T"), (1e9, "B"), (1e6, "M"))
                          if n_params > s), (1e3, "K"))
    scaled = n_params / scale
    digits = max(2 - len(str(round(scaled)).lstrip("0")), 0)
    return f"{scaled:.{digits}f}{suffix}"


def _general(w: GGUFWriter, kind: str, name: str, file_type: int, n_params: int,
             gen: GenerationParams) -> None:
    w.add_string("general.type", kind)
    w.add_string("general.name", name)
    w.add_string("general.size_label", size_label(n_params))
    w.add_uint32("general.file_type", file_type)
    w.add_uint32("general.quantization_version", GGML_QUANT_VERSION)
    if gen.top_k is not None:
        w.add_int32("general.sampling.top_k", gen.top_k)
    if gen.top_p is not None:
        w.add_float32("general.sampling.top_p", gen.top_p)
    if gen.temperature is not None:
        w.add_float32("general.sampling.temp", gen.temperature)
    if gen.repetition_penalty is not None:
        w.add_float32("general.sampling.penalty_repeat", gen.repetition_penalty)
    w.add_string(CONVERTER_KEY, f"edgevlm {__version__}")
    w.add_string(FINGERPRINT_KEY, string_placeholder())


def text_writer(name: str, file_type: int, n_params: int, cfg: ModelConfig, vocab: GgmlVocab,
                gen: GenerationParams) -> GGUFWriter:
    """A writer holding every key/value of ``model.gguf``."""
    w = GGUFWriter(None, TEXT_ARCH)
    _general(w, "model", name, file_type, n_params, gen)
    t, a = cfg.text, TEXT_ARCH
    w.add_uint32(f"{a}.block_count", t.n_layers)
    w.add_uint32(f"{a}.context_length", t.context_length)
    w.add_uint32(f"{a}.embedding_length", t.hidden_size)
    w.add_uint32(f"{a}.feed_forward_length", t.intermediate_size)
    w.add_uint32(f"{a}.attention.head_count", t.n_heads)
    w.add_uint32(f"{a}.attention.head_count_kv", t.n_kv_heads)
    w.add_array(f"{a}.rope.dimension_sections", [*t.mrope_section, 0, 0, 0, 0][:4])
    w.add_float32(f"{a}.rope.freq_base", t.rope_theta)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", t.rms_norm_eps)
    w.add_uint32(f"{a}.attention.key_length", t.head_dim)
    w.add_uint32(f"{a}.attention.value_length", t.head_dim)
    w.add_uint32(f"{a}.n_deepstack_layers", len(cfg.vision.deepstack_indexes))

    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", vocab.pre)
    w.add_array("tokenizer.ggml.tokens", vocab.tokens)
    w.add_array("tokenizer.ggml.token_type", vocab.token_types)
    w.add_array("tokenizer.ggml.merges", vocab.merges)
    for kind, tid in vocab.special_ids.items():
        w.add_uint32(_SPECIAL_ID_KEYS[kind], tid)
    w.add_bool("tokenizer.ggml.add_bos_token", vocab.add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", vocab.add_eos)
    if vocab.chat_template is not None:
        w.add_chat_template(vocab.chat_template)
    w.add_string("tokenizer.huggingface.json", vocab.tokenizer_json)

    for kind, tid in vocab.placeholder_ids.items():
        w.add_uint32(f"edgevlm.{kind}_token_id", tid)
    eos = gen.eos_token_ids or ((vocab.special_ids["eos"],) if "eos" in vocab.special_ids
                                else ())
    if eos:
        w.add_array("edgevlm.eos_token_ids", list(eos))
    return w


def vision_writer(name: str, file_type: int, n_params: int, cfg: ModelConfig,
                  proc: ProcessorParams, gen: GenerationParams) -> GGUFWriter:
    """A writer holding every key/value of ``mmproj.gguf``."""
    w = GGUFWriter(None, VISION_ARCH)
    _general(w, "mmproj", name, file_type, n_params, gen)
    v = cfg.vision
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.projection_dim", cfg.text.hidden_size)
    w.add_uint32("clip.vision.image_size", v.image_size)
    w.add_uint32("clip.vision.patch_size", v.patch_size)
    w.add_uint32("clip.vision.embedding_length", v.hidden_size)
    w.add_uint32("clip.vision.feed_forward_length", v.intermediate_size)
    w.add_uint32("clip.vision.block_count", v.depth)
    w.add_uint32("clip.vision.attention.head_count", v.n_heads)
    w.add_array("clip.vision.image_mean", list(proc.image_mean))
    w.add_array("clip.vision.image_std", list(proc.image_std))
    w.add_string("clip.projector_type", PROJECTOR_TYPE)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.spatial_merge_size", v.spatial_merge_size)
    # llama.cpp stores the text model's rms_norm_eps here; the ViT's LayerNorm eps is a
    # hard-coded 1e-6 in transformers, equal for every released checkpoint.
    w.add_float32("clip.vision.attention.layer_norm_epsilon", cfg.text.rms_norm_eps)
    if v.deepstack_indexes:
        w.add_array("clip.vision.is_deepstack_layers",
                    [i in v.deepstack_indexes for i in range(v.depth)])

    w.add_uint32("edgevlm.vision.temporal_patch_size", v.temporal_patch_size)
    w.add_float32("edgevlm.vision.rope_theta", v.rope_theta)
    for key, value in (("edgevlm.vision.min_pixels", proc.image_min_pixels),
                       ("edgevlm.vision.max_pixels", proc.image_max_pixels),
                       ("edgevlm.video.min_pixels", proc.video_min_pixels),
                       ("edgevlm.video.max_pixels", proc.video_max_pixels),
                       ("edgevlm.video.min_frames", proc.video_min_frames),
                       ("edgevlm.video.max_frames", proc.video_max_frames)):
        if value is not None:
            if not 0 <= value < 1 << 32:
                raise ConvertInputError(f"{key.removeprefix('edgevlm.')} = {value} is out of "
                                        "range")
            w.add_uint32(key, value)
    if proc.video_fps is not None:
        w.add_float32("edgevlm.video.fps", proc.video_fps)
    return w
