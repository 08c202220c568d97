"""``python -m xpml`` is the ``xpml`` command."""

import sys

from xpml.cli import main

sys.exit(main())
