"""What a run hands its user at the end: the self-contained model folder `<run>/final`, and what its
model card states (the recipe, the data, the steps, the last eval's figures). A run that ends without it
(a signal, a crash, non-finite steps, a failed write) says in its last line which checkpoint holds its
model and the command that writes the folder from it (`how_to_export`)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from speechlm.model.folder.io import save_pretrained
from speechlm.train import checkpoint as ckpt_mod

log = logging.getLogger("speechlm.train")


def card_info(config, run_dir: Path) -> dict:
    """The model card's run facts that do not change while it trains."""
    t = config.training
    return {
        "name": t.hub_model_id or run_dir.name,
        "repo": t.hub_model_id or str(Path("outputs") / run_dir.name / "final"),
        "data": [{"name": Path(d.path).name, "split": d.split} for d in config.data.train],
        "recipe": {
            "learning rate (projector / LoRA)": f"{t.learning_rate:g} / {t.decoder_learning_rate:g}",
            "ZeRO stage": config.deepspeed.zero_stage,
        },
    }


def write_final(model, run_dir: Path, rank: int, card: dict) -> Path | None:
    """`<run>/final` (collective: ZeRO-3 gathers the frozen bases too), written beside and renamed into
    place, so a crash never leaves half a final folder. A failed write (a full disk) is logged with the
    free space and returns None: the run still ends well, its checkpoints hold everything, and
    `speechlm export` writes the folder from the latest one later."""
    final, tmp = run_dir / "final", run_dir / ".tmp-final"
    ok, err = True, ""
    try:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        save_pretrained(model, tmp, self_contained=True, card=card)
        if rank == 0:
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
    except Exception as e:  # safetensors' and torch's writers report a full disk as other errors
        ok, err = False, repr(e)
    if ckpt_mod.all_ok(ok):
        return final
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        log.error(
            "final model folder FAILED (%s; %s); the checkpoints stay valid: `speechlm export %s OUT`",
            err or "on another rank",
            ckpt_mod.free_space(run_dir),
            run_dir,
        )
    return None


def how_to_export(run_dir: Path, ckpt, why: str) -> None:
    """The last line of a run that ends without `final`: its newest checkpoint and `speechlm export RUN OUT`
    (a checkpoint of a run on local bases finds them from the run, speechlm.inference.bases)."""
    latest = ckpt.latest()
    if latest is None:
        log.warning("%s: no checkpoint was written, so there is no model to export", why)
        return
    log.warning(
        "%s: no final model folder; checkpoint %s holds the model: `speechlm export %s OUT` writes it",
        why,
        latest.name,
        run_dir,
    )
