"""Lock stores. Import a provider module only when it is configured: the Cloudflare
providers pull in httpx, which a database-only project never needs to load."""
