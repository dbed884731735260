"""The companion Cloudflare Worker (``index.js``) that the Durable Objects provider talks to,
its wrangler configuration, a local launcher (``serve.mjs``) and :func:`export.write_worker_bundle`."""
