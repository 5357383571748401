"""`notifier dev`: everything in one process for a first look, with an inbox for its mail."""
