"""Following a pod's deployment on the DMS: the follower that deploys and polls, the pace of
the polls, the board of many deployments in one call, and what a poll reports."""
