"""Outside monitors: a dead-man's switch for scheduled jobs (``TSLOCK_MONITORS``).

Every journaled run of a scheduled job pings the configured monitors, a healthchecks.io
instance (:mod:`.healthchecks`) and Sentry Crons through the installed ``sentry-sdk``
(:mod:`.sentry`): at its start, and at its end with how it went. A monitor that hears
nothing when the schedule says it should raises the alarm itself, so it sees what the
journal cannot: the application's own death. Pings leave the job's path through one
background sender (:mod:`.sender`); the journal's recorder asks :func:`.run.watch` for a
run's monitor and tells it the run's start and end.
"""
