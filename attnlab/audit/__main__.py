"""``python -m attnlab.audit``: the auditor's command line (attnlab.audit.command_line)."""

import sys

from .command_line import main

sys.exit(main())
