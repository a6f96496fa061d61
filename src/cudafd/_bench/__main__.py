"""``python -m cudafd._bench [options]``: the same as ``python -m cudafd bench [options]``."""

import sys

from .suite import main

sys.exit(main(sys.argv[1:]))
