"""The soak: the real processes under crashes, restarts and a misbehaving mail server.

`python -m benchmarks.soak` requests N verifications through the API while three workers
deliver them and faults are injected, then checks DESIGN.md's invariants from outside (the
mail server's own log against the database) and prints a summary. See __main__ for options.
"""
