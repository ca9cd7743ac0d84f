"""Checkpoints that a crash cannot corrupt, and resume.

A save builds `checkpoints/.tmp-step-N/` (DeepSpeed state in `ds/`: the trained parameters and their
optimizer state only; the model folder of what the run trained in `model/`, speechlm.model.folder;
`trainer_state.json`), fsyncs it, renames it to `step-N/`, and only then moves the `latest` pointer
(written to a temp file, fsynced, renamed). A crash or an OSError (disk full) at any point leaves
`latest` on the previous complete checkpoint; a failed save is reported and training goes on.

A checkpoint written by another world size is loaded through DeepSpeed's universal checkpoint,
made once into `step-N/universal/` (speechlm.train.elastic). The folder's names are speechlm.runs', which
the loaders of a run (speechlm.inference.load) read too.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from speechlm import runs
from speechlm.config import ConfigError
from speechlm.fsutil import atomic_write as atomic_write_text
from speechlm.fsutil import fsync_dir as _fsync_dir
from speechlm.train import elastic

log = logging.getLogger("speechlm.train")

DS_TAG = "state"


# --------------------------------------------------------------------------- small helpers


def rng_state() -> dict:
    """This process's RNG states (python, numpy, torch, cuda) as plain JSON numbers: no pickle, so a
    checkpoint from elsewhere can't run code when resumed."""
    py = random.getstate()
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else None,
    }


def set_rng_state(saved: dict) -> None:
    py, n = saved["python"], saved["numpy"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))
    torch.set_rng_state(torch.tensor(saved["torch"], dtype=torch.uint8))
    if saved.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(x, dtype=torch.uint8) for x in saved["cuda"]])


def _fsync_tree(root: Path) -> None:
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(d))


def free_space(path: Path) -> str:
    # torch.save reports a full disk as e.g. "unexpected pos 680384 vs 680272": say what is left
    try:
        return f"{shutil.disk_usage(path).free / 2**20:.1f} MiB free on {path}"
    except OSError as e:
        return f"free space unknown: {e}"


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_ok(ok: bool) -> bool:
    """True only if every rank succeeded (so all ranks take the same branch afterwards)."""
    if not (dist.is_available() and dist.is_initialized()):
        return ok
    t = torch.tensor([0 if ok else 1], dtype=torch.long)
    dist.all_reduce(t)
    return int(t.item()) == 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class _WriteGuard:
    """Stands in for DeepSpeed's checkpoint engine during one save: a write that fails (disk full, an
    I/O error) is recorded instead of raised. A rank that raised out of `save_checkpoint` would skip
    the save's closing barrier while the other ranks wait in it, and every later collective would
    pair with the wrong one: a hang until the process-group timeout, or mismatched reductions. With
    the guard every rank runs DeepSpeed's save to its end, and the failure is then agreed on."""

    def __init__(self, inner):
        self.inner = inner
        self.error: Exception | None = None

    def save(self, state_dict, path: str) -> None:
        if self.error is None:  # after one failure this save is lost anyway: don't write more of it
            try:
                self.inner.save(state_dict, path)
            except Exception as e:  # torch.save reports a full disk as RuntimeError, not OSError
                self.error = e

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _trained_only(engine):
    """engine.module_state_dict with the trained parameters alone. DeepSpeed's exclude_frozen_parameters
    walks named_parameters(), which names a tied weight once, so a frozen tied LM head (and every frozen
    buffer) stayed in the file (pitfall 16). A resume rebuilds all of those from the bases."""
    module_state_dict = engine.module_state_dict
    trained = {n for n, p in engine.module.named_parameters(remove_duplicate=False) if p.requires_grad}

    def state(*args, **kwargs):
        # the projector's buffers (its CTC blank) are made fresh, not loaded from a base: they stay
        return {
            k: v for k, v in module_state_dict(*args, **kwargs).items() if k in trained or k.startswith("projector.")
        }

    return state


def _save_deepspeed(engine, path: Path, step: int) -> None:
    """engine.save_checkpoint with failures that leave every rank in step (see _WriteGuard)."""
    guard = _WriteGuard(engine.checkpoint_engine)
    copy_scripts = engine._copy_recovery_script  # rank 0 copies zero_to_fp32.py outside the engine

    def copy_guarded(save_path):
        try:
            copy_scripts(save_path)
        except OSError as e:
            guard.error = guard.error or e

    engine.checkpoint_engine, engine._copy_recovery_script = guard, copy_guarded
    engine.module_state_dict = _trained_only(engine)
    try:
        engine.save_checkpoint(
            str(path), tag=DS_TAG, client_state={"step": step}, save_latest=False, exclude_frozen_parameters=True
        )
    finally:
        engine.checkpoint_engine = guard.inner
        del engine._copy_recovery_script  # the class's method again
        del engine.module_state_dict
    if guard.error is not None:
        raise guard.error
    # DeepSpeed's own tools (the zero_to_fp32.py it copies here: `python zero_to_fp32.py . OUT`)
    # find the tag through a `latest` file. DeepSpeed's save_latest writes it outside the write
    # guard, so it is written here, where an OSError is this rank's failed save like any other.
    if _world()[0] == 0:
        atomic_write_text(path / "latest", DS_TAG)


# --------------------------------------------------------------------------- manager


def _self_export(model, path: str) -> None:
    model.save_pretrained(path)


class CheckpointManager:
    """`export(model, dir)` writes the model folder every checkpoint holds, loadable by speechlm and
    transformers alike (pitfall 9): the trainer hands it speechlm.model.folder.io.save_pretrained; by default a
    model saves itself."""

    def __init__(self, run_dir: str | Path, save_total_limit: int | None = None, export=_self_export):
        self.dir = Path(run_dir) / runs.CHECKPOINTS
        self.limit = save_total_limit
        self.export = export
        self.rank, self.world = _world()

    # ------------------------------------------------------------------ where things are
    def latest(self) -> Path | None:
        return runs.latest(self.dir)

    def resolve(self, spec: str | None) -> Path | None:
        """`auto` -> the latest complete checkpoint of this run (None: start fresh); else a path to
        a `step-N` dir or to a run/checkpoints dir holding a `latest` pointer."""
        if not spec:
            return None
        if spec == "auto":
            return self.latest()
        found = runs.checkpoint_at(spec)
        if found is None:
            raise ConfigError(f"training.resume_from_checkpoint: no complete checkpoint at {spec}")
        return found

    def steps(self) -> list[tuple[int, Path]]:
        if not self.dir.is_dir():
            return []
        out = [(int(m.group(1)), p) for p in self.dir.iterdir() if (m := runs.STEP_RE.match(p.name)) and p.is_dir()]
        return sorted(out)

    # ------------------------------------------------------------------ save
    def save(self, step: int, engine, model, trainer_state: dict, local_state: dict) -> Path | None:
        """Collective: every rank calls it. Returns the new checkpoint dir, or None if the save failed
        (the previous checkpoint stays valid and `latest` still points to it)."""
        final = self.dir / runs.step_name(step)
        tmp = self.dir / f".tmp-{runs.step_name(step)}"
        ok = True
        err = ""
        if self.rank == 0:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
            except OSError as e:
                ok, err = False, repr(e)
        if all_ok(ok):
            try:
                _save_deepspeed(engine, tmp / "ds", step)
            except Exception as e:  # torch.save reports a full disk as RuntimeError, not OSError
                ok, err = False, repr(e)
        if all_ok(ok):
            try:  # collective: under ZeRO-3 the model gathers its shards on every rank; rank 0 writes
                self.export(model, str(tmp / runs.MODEL))
            except Exception as e:  # safetensors' writer errors are not OSErrors either
                ok, err = False, repr(e)
        if all_ok(ok):
            ok, err = self._write_state(tmp, final, step, trainer_state, local_state)
        ok = all_ok(ok)
        self._retrace(engine)
        if not ok:
            self._failed(tmp, step, err)
            return None
        if self.rank == 0:
            self._prune()
        _barrier()
        return final

    def _write_state(self, tmp: Path, final: Path, step: int, trainer_state: dict, local_state: dict):
        """Collective: every rank's state gathered; rank 0 writes trainer_state.json, fsyncs and publishes.
        (ok, why not) on this rank."""
        ranks = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(ranks, local_state)
        else:
            ranks = [local_state]
        if self.rank == 0:
            try:
                state = {**trainer_state, "step": step, "world_size": self.world, "ranks": ranks}
                (tmp / runs.STATE).write_text(json.dumps(state, default=str))
                _fsync_tree(tmp)
                self._publish(tmp, final)
            except OSError as e:
                return False, repr(e)
        return True, ""

    def _failed(self, tmp: Path, step: int, err: str) -> None:
        """A save that failed on some rank: its temporary folder removed, and one line that says so."""
        if self.rank != 0:
            return
        shutil.rmtree(tmp, ignore_errors=True)
        prev = self.latest()
        log.error(
            "checkpoint step-%d FAILED (%s; %s); the previous checkpoint %s stays valid",
            step,
            err or "on another rank",
            free_space(self.dir),
            prev if prev else "(none yet)",
        )

    @staticmethod
    def _retrace(engine) -> None:
        """ZeRO-3 prefetches parameters in the order it traced during a step. The save's gathers
        (export, checkpoint) after a resume left that trace out of step with the next backward
        ("tracing error ... expected the next 1 parameters in the parameter fetch queue", DeepSpeed
        #3599): have it trace again from the next step."""
        offload = getattr(engine.optimizer, "parameter_offload", None)
        if offload is not None:
            coordinator = offload.get_param_coordinator()
            if not coordinator.is_invalid_trace():
                coordinator._invalidate_trace()

    def _publish(self, tmp: Path, final: Path) -> None:
        # A re-save of an existing step (after a resume) is moved aside first: os.rename will not
        # replace a non-empty dir, and `latest` must never point at a half-removed one.
        old = None
        if final.exists():
            old = final.with_name(f".old-{final.name}")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(self.dir)
        atomic_write_text(self.dir / runs.LATEST, final.name)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def _prune(self) -> None:
        if not self.limit or self.limit <= 0:
            return
        keep = self.latest()
        steps = self.steps()
        for _, p in steps[: max(0, len(steps) - self.limit)]:
            if keep is None or p.resolve() != keep.resolve():
                shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ load
    @staticmethod
    def read_state(path: Path) -> dict:
        return json.loads((path / runs.STATE).read_text())

    def universal(self, path: Path) -> Path:
        """Collective: `path`'s DeepSpeed state as a universal checkpoint (rank 0 converts it once)."""
        out = path / elastic.UNIVERSAL_DIR
        ok, err = True, ""
        if self.rank == 0 and not (out / DS_TAG).is_dir():
            try:
                took = elastic.convert(path / "ds", DS_TAG, out)
                _fsync_tree(out)
                _fsync_dir(path)
                log.warning("converted %s to a universal checkpoint for %d processes in %.1f s", path, self.world, took)
            except Exception as e:  # every rank must leave together, not wait for a rank that died
                ok, err = False, str(e)
        if not all_ok(ok):
            raise RuntimeError(err or "the universal conversion failed on rank 0")
        return out

    def load(self, path: Path, engine) -> tuple[dict, dict]:
        """Restore the engine (module, optimizer, scheduler); returns (trainer_state, this rank's state).

        A checkpoint from another world size goes through DeepSpeed's universal checkpoint (the
        engine must have been built with `"checkpoint": {"load_universal": true}`); every rank's
        reader state is the same, and a rank the saving run did not have takes rank 0's RNG state
        (all ranks start from the same seed anyway)."""
        state = self.read_state(path)
        universal = state["world_size"] != self.world
        folder = self.universal(path) if universal else path / "ds"
        if universal != bool(engine.load_universal_checkpoint()):
            raise RuntimeError("the engine's checkpoint.load_universal does not match the checkpoint's world size")
        settings = elastic.group_settings(engine.optimizer)
        load_path, _ = engine.load_checkpoint(
            str(folder), tag=DS_TAG, load_module_strict=False, load_optimizer_states=True, load_lr_scheduler_states=True
        )
        if load_path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint in {folder}")
        if universal:
            elastic.repair_after_universal_load(engine.optimizer, settings, engine.lr_scheduler.get_last_lr())
        ranks = state["ranks"]
        return state, ranks[self.rank] if self.rank < len(ranks) else ranks[0]
