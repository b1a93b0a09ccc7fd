"""``python -m benchmarks``: the headline figure of every benchmark, next to its peer
measured in the same run, as one table (:mod:`benchmarks.headline`; ``--help``)."""

import sys

from benchmarks.headline import main

sys.exit(main())
