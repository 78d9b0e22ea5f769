"""``python -m attnlab.grader grade ...``: see :mod:`attnlab.grader.cli`."""

import sys

from attnlab.grader.cli import main

sys.exit(main())
