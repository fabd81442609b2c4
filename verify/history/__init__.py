"""Every verify run remembered: a node judged against its own past, and the verdict acted on.

- store.py: the SQLite history (standard library), versioned, migrated, safe to append to from
  several runs at once, refusing a file that is not its own;
- regress.py: pure judging of one run against the node's own last runs (regression, drift);
- record.py: the glue a verify run calls (open, judge, record) for one node or a fleet run;
- trend.py + plots.py: `tunefleet history` (table, CSV, JSON, HTML with SVG trends);
- ack.py: `tunefleet ack HOST --reason TEXT`, an operator's repair; the lookback rule is in store.py;
- drain.py: `--on-fail drain` / `--on-pass resume` through Slurm or Kubernetes, via the Node's runner.
"""
