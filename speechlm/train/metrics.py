"""Rank-0 observability: metrics.jsonl in the run dir, W&B (online or offline), a tqdm bar.

Every other rank gets a logger whose methods do nothing, so the loop never branches on rank.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from speechlm.config import Config, to_dict

log = logging.getLogger("speechlm.train")


def setup_logging(rank: int) -> None:
    """INFO on rank 0, warnings elsewhere, for the `speechlm` loggers; root handlers are left alone
    (a host that configured logging, or pytest's capture, keeps receiving the records)."""
    logger = logging.getLogger("speechlm")
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    if not logging.getLogger().handlers and not logger.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter(f"%(asctime)s [rank{rank}] %(message)s", datefmt="%H:%M:%S"))
        logger.addHandler(h)
        logger.propagate = False


class Metrics:
    def __init__(self, cfg: Config, run_dir: Path, rank: int, total_steps: int, start_step: int = 0):
        self.enabled = rank == 0
        self.path = Path(run_dir) / "metrics.jsonl"
        self.wandb = None
        self.bar = None
        if not self.enabled:
            return
        self.file = open(self.path, "a")
        t = cfg.training
        if t.report_to == "wandb":
            import wandb

            # WANDB_MODE=offline works: the run is written under the run dir and synced later.
            self.wandb = wandb.init(
                project=t.wandb_project,
                name=Path(run_dir).name,
                dir=str(run_dir),
                config=to_dict(cfg),
                resume="allow",
                id=_wandb_id(run_dir),
            )
        self.bar = tqdm(
            total=total_steps, initial=start_step, desc="train", dynamic_ncols=True, file=sys.stderr, mininterval=1.0
        )

    def log(self, step: int, values: dict) -> None:
        if not self.enabled:
            return
        row = {"step": step, "time": round(time.time(), 3), **values}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.wandb is not None:  # numbers only (the jsonl also keeps e.g. the clip ids of a skipped step)
            self.wandb.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def progress(self, step: int, loss: float, lr: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", refresh=False)
            self.bar.update(step - self.bar.n)  # redraws at most every `mininterval` seconds

    def line(self, text: str) -> None:
        """One clear line (eval result, checkpoint) that does not break the bar."""
        if self.enabled:
            if self.bar is not None:
                self.bar.clear()
            log.info(text)
            if self.bar is not None:
                self.bar.refresh()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.close()
        self.file.close()
        if self.wandb is not None:
            self.wandb.finish()


def _wandb_id(run_dir: Path) -> str:
    """A stable W&B run id per run dir, so a resumed run continues the same W&B run."""
    p = Path(run_dir) / ".wandb_id"
    if p.is_file():
        return p.read_text().strip()
    import secrets

    rid = secrets.token_hex(4)  # W&B ids: [a-z0-9]
    p.write_text(rid)
    return rid


def peak_memory_gb(device) -> float:
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (CPU: peak RSS)
