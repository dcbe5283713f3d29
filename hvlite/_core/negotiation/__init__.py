"""Agreeing on what is ready everywhere: the agreement round, the slow round's exchange, the wire
format, rank 0's controller and table, the response cache and the stall check."""
