"""Side-by-side benchmarks of tslock_django against its peers (run ``python -m bench``).

Every comparison is interleaved: the contenders take turns in rounds inside one run, so
a noisy neighbour or a CPU frequency change hits all of them alike. Each round is a
time-boxed batch of lock+unlock cycles; the report gives the median and the p10-p90
spread of the per-round rates and the ratio of medians against tslock.
"""
