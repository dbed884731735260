"""The ``tslock`` management command's subcommands, one module each."""
