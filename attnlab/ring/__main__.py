"""``python -m attnlab.ring`` and ``torchrun ... -m attnlab.ring``: the command line of :mod:`attnlab.ring.cli`.

The functions come from the package (``attnlab.ring.cli``), not from this file run as
``__main__``: the processes must find them in ``attnlab.ring``.
"""

import sys

from attnlab.ring.cli import main

sys.exit(main())
