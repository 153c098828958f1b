"""PostgreSQL access shared by every service: pools, dedicated connections, session settings
and the classification of the driver's errors (:mod:`.connections`)."""
