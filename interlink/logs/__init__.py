"""Container logs: read from the DMS's log files, kept by the gateway for ended runs, and served
for ``/getLogs``."""
