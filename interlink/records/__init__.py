"""What the gateway knows of each pod and how it shows it: the record kept and saved, the pod's
phases and the moves between them, its containers' runs and probes, its ``/status`` snapshot and
its endpoints. Data and pure rules only: the actor that acts on them is in :mod:`..pods`."""
