"""The run journal: did each job run, when, for how long, did it fail, is it late.

``recorder`` writes a run (``begin`` -> ``RunRecorder``); ``status`` reads the journal
(a name's runs, each scheduled name's status); ``schedules`` reads ``schedule`` and
``grace``; ``retention`` purges old runs; ``models`` holds the ``Run`` and ``Job``
tables. The lock path calls only ``recorder`` (see ``tslock_django.core.executor``'s
callers: ``locked_command``, ``lock(journal=True)``, ``tslock run``, ``locked_task``).
"""
