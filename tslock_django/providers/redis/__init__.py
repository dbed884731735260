"""Locks in Redis: ``RedisLockProvider``, on redis-py (``pip install 'tslock-django[redis]'``).

Strong on one Redis primary: every operation is one Lua script (``scripts``) that Redis
runs atomically, with deadlines on Redis's own clock, so one round trip decides and this
machine's clock never does. A failover to a replica can lose a lock: Redis replicates
asynchronously, so a lock acquired just before the primary died may be missing on the
replica that takes over, and a second holder can then acquire it.

Records stay after they expire (the admin shows who last ran a job and when) until
``purge`` removes the old ones; the fencing counters are never removed.

The modules: ``provider`` (the operations), ``scripts`` (the Lua side and the keys),
``replies`` (reading the answers), ``errors`` (what a failure means), ``clients`` (how
it connects, sync and asyncio). redis-py is imported by this package only, which
``tslock_django`` imports only when a Redis provider is configured.
"""

try:
    import redis  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the installation
    raise ImportError("the Redis lock provider needs redis-py: pip install 'tslock-django[redis]'") from err

from .provider import RedisLockProvider

__all__ = ["RedisLockProvider"]
