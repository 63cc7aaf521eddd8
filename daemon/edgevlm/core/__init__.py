"""The door to the C core (``edgevlm._native``, built by cffi): the library handle and the one
place that maps its status codes to Python errors (:mod:`.native`), and the core's strict
base64 decoder (:mod:`.base64_native`). Below every other layer but ``wire.errors``; the model
itself is driven by :mod:`edgevlm.engine`."""
