"""Short (CI) or long runs of tests/reliability: ``EDGEVLM_LONG=1`` picks the long ones
(``scripts/reliability-long.sh``)."""

from __future__ import annotations

import os

LONG = os.environ.get("EDGEVLM_LONG") == "1"
