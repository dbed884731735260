"""Two tiny management commands for the start-up benchmark (one decorated, one not)."""
