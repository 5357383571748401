"""The soak: the real processes under crashes, restarts and a misbehaving mail server.

test_soak.py requests N verifications through the API while three workers deliver them and
faults are injected, then checks DESIGN.md's invariants from outside (the mail server's own
log against the database) and prints a summary. options.py has its command-line options.
"""
