"""The gateway's durable state: the pod store, its schema, its binding to one DMS, and the
recovery of pods after a restart."""
