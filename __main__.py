"""``python -m dmsgw`` is the ``dmsgw`` command."""

from .cli import main

raise SystemExit(main())
