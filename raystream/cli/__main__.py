"""``python -m raystream.cli``: the same as the ``raystream`` command."""

import sys

from raystream.cli import main

sys.exit(main())
