"""The NuNet plugin for interLink."""
