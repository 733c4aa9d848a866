"""interLink's plugin API and the Kubernetes objects it carries, as Go reads and writes them: the
bodies, their models and their parsing."""
