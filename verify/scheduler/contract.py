"""The hooks by name, for the command line and the modes alike. Light on purpose (verify.safe_io, which the
launcher has imported already): a prolog's command line is parsed, and its NVML reading started, before the
checks are imported."""
from __future__ import annotations

from verify.safe_io import is_host_root

MODES = ("prolog", "epilog", "health", "npd")
# Run at every job's start and end (<= 0.5 s): the prolog's check set (verify.scheduler.modes.PROLOG_CHECKS),
# no peer access; their NVML reading starts before their imports (verify.scheduler.cli).
JOB_MODES = ("prolog", "epilog")
NPD_OUTPUT_LIMIT = 80  # node-problem-detector's custom plugin default maxOutputLength
DEFAULT_TEXTFILE_DIR = "/var/lib/tunefleet-metrics"  # root-owned 0755; node_exporter --collector.textfile.directory


def live_node(inject: object, root: str) -> bool:
    """The GPUs and the kernel log are read from the node itself (NVML, /dev/kmsg): not in a drill (--inject,
    where the captures are what is judged), not over a --root tree."""
    return not inject and is_host_root(root)
