"""End to end, commit to client: the scenarios A-D, the rate sweep, and the reconnect storm."""
