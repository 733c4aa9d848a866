"""What the DMS network can run and who waits for it: the resource actor, the virtual node's
capacity and taints, and the admission queue of pods waiting for capacity."""
