"""The one way tunefleet runs a command (as root on shared nodes): tools, Ansible, engines, launchers.

Nothing of the caller's chooses what runs or what it loads:
- bare names are found on the fixed root-owned PATH (verify.safe_io.command_path), and a tool given
  by explicit path must pass the same trust check as a directory (verify.safe_io.check_file_trusted);
- the environment is allow-listed (clean_env): the operator's GPU/NCCL/thread settings pass, never
  LD_PRELOAD, LD_LIBRARY_PATH, PYTHON*, TMPDIR, ANSIBLE_* or the caller's PATH;
- the command starts in `/` (or a directory passing verify.safe_io's trust check), never the
  caller's cwd, where an ansible.cfg or a Python module would be picked up;
- its output is read up to a cap: a tool that streams without end is killed, not buffered until the
  run dies of MemoryError.
Tests inject a fake runner with the same call.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from verify.interrupt import deferred
from verify.safe_io import check_dir_trusted, check_file_trusted, command_path, is_host_root

# What a command keeps of verify's own environment: the GPU, NCCL and thread settings the operator
# set on purpose (NCCL_NVLS_ENABLE=0 on multi-GPU H200s, CUDA_VISIBLE_DEVICES), the locale and time
# zone, each by name. Everything else (LD_*, PYTHON*, TMPDIR, ANSIBLE_*, PATH, IFS...) would let the caller
# pick what root runs or loads, and so would a prefix: CUDA_INJECTION64_PATH, NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN,
# NCCL_PROFILER_PLUGIN, NCCL_ENV_PLUGIN, NCCL_CONF_FILE (a file of more settings), UCX_MODULE_DIR,
# OMP_TOOL_LIBRARIES and NVSHMEM_BOOTSTRAP_PLUGIN load a library; NCCL_DEBUG_FILE, NCCL_TOPO_DUMP_FILE and
# CUDA_CACHE_PATH write where the caller says. Names from NCCL's "Environment Variables" page
# (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html), CUDA's and PyTorch's own lists.
KEPT_SETTINGS = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "CUDA_CACHE_DISABLE", "CUDA_AUTO_BOOST", "CUDA_DISABLE_PERF_BOOST",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_TF32_OVERRIDE",
    "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_CROSS_NIC",
    "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_SL", "NCCL_IB_TC",
    "NCCL_IB_FIFO_TC", "NCCL_IB_AR_THRESHOLD", "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_MERGE_NICS", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_IBEXT_DISABLE", "NCCL_NET", "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ", "NCCL_NET_SHARED_BUFFERS", "NCCL_NET_SHARED_COMMS", "NCCL_NET_FORCE_FLUSH",
    "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_READ_ENABLE", "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PXN_LEVEL", "NCCL_PXN_DISABLE", "NCCL_NVB_DISABLE",
    "NCCL_SHM_DISABLE", "NCCL_SHM_USE_CUDA_MEMCPY", "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_CTAS", "NCCL_MIN_CTAS", "NCCL_CGA_CLUSTER_SIZE", "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS", "NCCL_LAUNCH_MODE", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS",
    "NCCL_COLLNET_ENABLE", "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_CHUNKSIZE", "NCCL_MNNVL_ENABLE", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_DMABUF_ENABLE",
    "NCCL_GRAPH_REGISTER", "NCCL_LOCAL_REGISTER", "NCCL_RUNTIME_CONNECT", "NCCL_SET_STACK_SIZE",
    "NCCL_SET_THREAD_NAME", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_COMM_BLOCKING", "NCCL_WORK_FIFO_BYTES",
    "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_PORT_RANGE", "NCCL_HOSTID", "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT", "NCCL_SHARP_DISABLE",
    "NVSHMEM_DISABLE_NVLS", "NVSHMEM_SYMMETRIC_SIZE", "NVSHMEM_REMOTE_TRANSPORT", "NVSHMEM_HCA_LIST",
    "NVSHMEM_IB_GID_INDEX",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ENABLE_MONITORING",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_NCCL_USE_COMM_NONBLOCKING",
    "TORCH_DISTRIBUTED_DEBUG", "TORCH_SHOW_CPP_STACKTRACES", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "GLOO_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT",
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "OMP_DYNAMIC", "OMP_WAIT_POLICY",
    "MKL_NUM_THREADS", "MKL_DYNAMIC", "MKL_CBWR",
    "UCX_TLS", "UCX_NET_DEVICES", "UCX_IB_GID_INDEX", "UCX_RNDV_THRESH", "UCX_IB_SL", "UCX_MAX_RNDV_RAILS",
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE", "LC_MONETARY", "LC_MESSAGES",
    "TZ", "TERM",
})
DEFAULT_CWD = "/"
MAX_OUTPUT_BYTES = 64 << 20  # `nvidia-smi -q` of 8 GPUs or a verbose nccl-tests run is a few MB


@dataclass
class CommandOutput:
    argv: list
    returncode: Optional[int]
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    missing: bool = False  # the executable does not exist (or was refused: stderr says why)
    overflowed: bool = False  # printed more than the runner keeps: killed, stderr says so

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.missing and not self.overflowed and self.returncode == 0


Runner = Callable[..., CommandOutput]


class CleanEnv(dict):
    """A command's whole environment, used as given (clean_env builds one; engine_env extends it)."""


def clean_env(extra: Optional[Mapping[str, str]] = None, interpreter_first: bool = False) -> CleanEnv:
    """The allow-listed environment of a command run as root: the kept settings of verify's own
    environment, the fixed PATH, the effective user's own HOME, then `extra` (set by tunefleet itself)."""
    env = CleanEnv({name: value for name, value in os.environ.items()
                    if name in KEPT_SETTINGS})
    env.update({"PATH": command_path(interpreter_first), "HOME": pwd.getpwuid(os.geteuid()).pw_dir})
    env.update(extra or {})
    return env


def _refused(argv: list, why: str, start: float) -> CommandOutput:
    return CommandOutput(argv, None, "", why, time.monotonic() - start, missing=True)


def run_command(
    argv: Sequence[str],
    timeout_s: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
) -> CommandOutput:
    """Run argv; never raises for a missing or refused tool, a non-zero exit, a hang or endless output.

    env: a CleanEnv is the whole environment; any other mapping is added to clean_env(). cwd must pass
    the trust check (default `/`). The child gets its own process group so a hung benchmark and
    everything it started are killed together, and the output it printed so far is kept. An interrupt
    (KeyboardInterrupt, SIGTERM turned into one by verify.interrupt) kills that group too, then propagates.
    """
    start = time.monotonic()
    argv = [str(a) for a in argv]
    full_env = dict(env) if isinstance(env, CleanEnv) else clean_env(env)
    workdir = cwd or DEFAULT_CWD
    try:
        check_dir_trusted(workdir)
        if argv and "/" in argv[0]:
            check_file_trusted(argv[0])
    except FileNotFoundError as exc:
        return _refused(argv, str(exc), start)
    except OSError as exc:
        return _refused(argv, f"refused: {exc.strerror or exc}", start)
    proc = None
    try:
        # Deferred: a signal landing between fork and the assignment would leave a child no one kills.
        with deferred():
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=full_env, cwd=workdir, start_new_session=True)
        max_output = MAX_OUTPUT_BYTES  # read at call time: one cap for every command (tests lower it)
        out, err, timed_out, overflowed = _collect(proc, start + timeout_s, max_output)
        if timed_out or overflowed:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        stderr = _text(err)
        if overflowed:
            stderr += f"\n[tunefleet] {argv[0]} printed more than {max_output} bytes: stopped and killed"
        return CommandOutput(argv, proc.returncode, _text(out), stderr, time.monotonic() - start,
                             timed_out=timed_out, overflowed=overflowed)
    except (FileNotFoundError, PermissionError) as exc:
        if proc is not None:
            raise
        return _refused(argv, str(exc), start)
    except BaseException:
        # Ctrl-C or SIGTERM (verify.interrupt.Interrupted): the child sits in its own session, so
        # the terminal's SIGINT never reached it; kill its whole group before the interrupt goes on.
        if proc is None:
            raise
        with deferred():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        raise


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _collect(proc: subprocess.Popen, deadline: float, max_output: int) -> tuple:
    """(stdout, stderr, timed out, overflowed): both pipes read until they close, the deadline
    passes or together they hold more than max_output bytes."""
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    total = 0
    with selectors.DefaultSelector() as selector:
        for pipe in buffers:
            selector.register(pipe, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), True, False
                for key, _ in selector.select(timeout=left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffers[key.fileobj] += chunk
                    total += len(chunk)
                    if total > max_output:
                        return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, True
        finally:
            for pipe in buffers:
                pipe.close()
    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, False


def which(name: str, root: str = "/") -> Optional[str]:
    """A tool on the fixed root-owned PATH (verify.safe_io.command_path), never the caller's PATH;
    only when root is the live system: a tree under --root has no runnable tools."""
    if not is_host_root(root):
        return None
    return shutil.which(name, path=command_path())
