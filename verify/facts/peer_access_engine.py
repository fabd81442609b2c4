"""Peer access engine: whether each GPU can map each other GPU's memory, as CUDA answers it.

Run as `python3 -m verify.facts.peer_access_engine` (verify.engine.engine_argv, never imported by the
verify process: torch takes seconds to import and may crash). For every ordered pair of CUDA devices it
asks `torch.cuda.can_device_access_peer(a, b)` (cudaDeviceCanAccessPeer) and prints one marked JSON line
(verify.engine.emit_result); without torch or without a CUDA device it says why on stderr and exits
verify.engine.CANNOT_RUN. Run with CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA's ordinals follow the PCI bus
order nvidia-smi numbers GPUs by; each device's bus id is reported too, where torch gives it.
"""

from __future__ import annotations

import sys

from verify.engine import CANNOT_RUN, ListOf, Maybe, cuda_torch, emit_result, torch_bus_id

# What the engine emits (verify.engine.checked_payload checks it where it enters verify).
PAYLOAD_SCHEMA = {
    "gpus": ListOf({"ordinal": int, "name": str, "bus_id": Maybe(str)}),
    "pairs": ListOf({"src": int, "dst": int, "can_access": bool}, may_be_empty=True),
    "torch": str,
}


def main() -> int:
    torch, why = cuda_torch()
    if torch is None:
        print(why, file=sys.stderr)
        return CANNOT_RUN
    count = torch.cuda.device_count()
    gpus = []
    for ordinal in range(count):
        props = torch.cuda.get_device_properties(ordinal)
        gpus.append({"ordinal": ordinal, "name": props.name, "bus_id": torch_bus_id(props)})
    pairs = [{"src": src, "dst": dst, "can_access": bool(torch.cuda.can_device_access_peer(src, dst))}
             for src in range(count) for dst in range(count) if src != dst]
    emit_result({"gpus": gpus, "pairs": pairs, "torch": str(torch.__version__)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
