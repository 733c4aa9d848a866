"""The files a running devnet leaves for its clients: the record that finds it, and the times
beside each allocation's log. Both the devnet and the client read them; neither owns the other."""
