"""Serving: what it takes to run a model for many requests.

`memory`: the memory calculator (no torch). `paged_cache`: blocks, block tables, fork / copy on write.
`scheduler`: continuous batching with preemption and parallel sampling. `roofline`: FLOPs and bytes of a
forward and the machine's measured peaks. `results`: what a served batch of requests yields, plain dataclasses
for `viz`. `view`: a scheduler's state as those results.
"""
