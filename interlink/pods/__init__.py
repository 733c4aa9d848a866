"""One Kubernetes pod on the DMS: its ``PodActor``, the record kept of it, its phases, its
containers' runs and probes, its ``/status`` snapshot, its endpoints and its translation."""
