"""The subcommands of ``manage.py tslock``, one module each."""
