"""locked_task and tslock run under real job runners."""
