"""A test app whose jobs have bad decorator arguments (not installed by tests.settings:
tests install it with override_settings, or in a fresh process)."""
