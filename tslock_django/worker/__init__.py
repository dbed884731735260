"""The companion Cloudflare Worker that the Durable Objects provider talks to (ES modules,
``index.js`` the entry), its wrangler configuration, :func:`export.write_worker_bundle`, and
the local runner of the Worker on the Workers runtime (``serve.mjs``, driven from Python by
:mod:`.runtime`)."""
