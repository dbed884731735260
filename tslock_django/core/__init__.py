"""The store-independent core: durations, configuration, records, clock, provider base,
executor and keep-alive."""
