"""Pre-emption signals and batches to the device: the small pieces the loop hands off."""

from __future__ import annotations

import signal

import torch

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class StopFlag:
    """SIGTERM/SIGUSR1 only set a flag; the loop checks it (all ranks agree) at a step boundary."""

    def __init__(self):
        self.signum = 0
        self.previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}

    def _handle(self, signum, frame):
        self.signum = signum

    def restore(self):
        for s, h in self.previous.items():
            signal.signal(s, h)


def to_device(batch: dict, device) -> dict:
    return {k: (v.to(device, non_blocking=True) if torch.is_tensor(v) else v) for k, v in batch.items()}
