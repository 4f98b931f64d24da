"""``python -m rdu.cli``: the ``rdu`` command."""

import sys

from rdu.cli import main

sys.exit(main())
