"""`python -m notifier` runs the CLI."""

from notifier.cli import main

main()
