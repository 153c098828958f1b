"""The HTTP edge under hostile load: header and pipelining floods, connection churn, and the
cost of the limits per request."""
