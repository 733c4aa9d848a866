"""``python -m dmsgw`` is the ``dmsgw`` command."""

from dmsgw.cli import main

raise SystemExit(main())
