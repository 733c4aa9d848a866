"""A pod's life on the DMS: its ``PodActor`` and the follower that deploys and polls for it, the
pace of the polls, the board of many deployments in one call, what a poll reports, the pod's
translation, and the creates and deletes under way."""
