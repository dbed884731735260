"""The companion Cloudflare Worker that the Durable Objects provider talks to (ES modules,
``index.js`` the entry), its wrangler configuration, a local launcher (``serve.mjs``) and
:func:`export.write_worker_bundle`."""
