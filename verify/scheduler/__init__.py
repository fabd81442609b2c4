"""`tunefleet check --mode MODE`: tunefleet inside the scheduler's hooks (docs/scheduler.md).

A mode of running beside verify.local_run (one node, no benchmark): it reads the same desired state and
profile, runs a set of the registered checks with in-process NVML and a kernel-log cursor, keeps its
state between runs (state.py), writes the Prometheus textfile, and answers in the contract of the hook
that runs it (modes.py). Nothing imports this package but the CLI.
"""
