"""``python -m edgevlm`` is the ``edgevlm`` command."""

import sys

from .cli import main

sys.exit(main())
