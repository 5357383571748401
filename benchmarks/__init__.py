"""Benchmarks of notifier: real PostgreSQL, real SMTP sink, real worker processes.

`python -m benchmarks` runs poll vs notify latency, cost and throughput side by side and
writes one JSON file, a markdown summary and plots (see benchmarks/README.md). The soak,
which checks rather than measures, is a test tier: tests/soak.
"""
