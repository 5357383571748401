"""The storage wing: the database (pools, the embedded server, migrations), the named query
catalogue, and what reads and writes through them for every wing above."""
