"""``python -m raystream``: the ``raystream`` command, for an environment whose scripts
directory is not on ``PATH`` (the same as ``python -m raystream.cli``)."""

import sys

from raystream.cli import main

if __name__ == "__main__":
    sys.exit(main())
