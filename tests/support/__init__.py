"""What several test modules share, grouped by what it helps test; no test module imports
another (``tests/test_architecture.py`` holds that). Fixtures built on these live in
``tests/conftest.py``."""
