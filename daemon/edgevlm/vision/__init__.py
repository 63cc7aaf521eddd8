"""Image and video input: safe decoding, resize rules and token counts, ViT patches.

- :mod:`.sizing`: ``smart_resize`` and token counts from sizes alone (for preflight);
- :mod:`.decode`: Pillow decoding behind a format allow-list and a header pixel cap;
- :mod:`.preprocess`: resize, normalise and patchify, bit-compatible with transformers;
- :mod:`.prepare`: a request's media parts -> cached features or pixels for the encoder;
- :mod:`.cache_key`: the name of a media item's features in the cache.
"""

from .decode import ImageHeader, MediaPolicy, decode_image, probe_image
from .preprocess import (
    IMAGE_MEAN_DEFAULT,
    IMAGE_STD_DEFAULT,
    PixelInput,
    preprocess_image,
    preprocess_video,
)
from .sizing import (
    FAMILIES,
    Family,
    ImageTokens,
    VideoTokens,
    get_family,
    group_timestamps,
    image_tokens,
    pixel_bounds,
    smart_resize,
    video_smart_resize,
    video_tokens,
)

__all__ = [
    "FAMILIES",
    "IMAGE_MEAN_DEFAULT",
    "IMAGE_STD_DEFAULT",
    "Family",
    "ImageHeader",
    "ImageTokens",
    "MediaPolicy",
    "PixelInput",
    "VideoTokens",
    "decode_image",
    "get_family",
    "group_timestamps",
    "image_tokens",
    "pixel_bounds",
    "preprocess_image",
    "preprocess_video",
    "probe_image",
    "smart_resize",
    "video_smart_resize",
    "video_tokens",
]
