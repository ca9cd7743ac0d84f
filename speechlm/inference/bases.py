"""Where a model's local bases are: the `--base PART=PATH` flag of every command that takes `-m`
(transcribe, eval, export, serve), and the run a checkpoint was trained in.

A model folder names a base that was a local folder by its name and sha256 only (speechlm.model.folder.io:
no path of the training machine is recorded in it). A checkpoint inside a run folder
(`RUN/checkpoints/step-N/model`) finds such a base from the run's own resolved config, as the
trainer recorded it (`step-N/trainer_state.json`, else `RUN/config.yaml`), so on the machine that
trained it every checkpoint loads with no flag; elsewhere `--base decoder=PATH` (`encoder=PATH`)
names the folder. Either way the base's sha256 is checked against the recorded one
(speechlm.model.folder.io.resolve_base). Light: argparse, json and yaml only, so a CLI checks its flags
before the model stack loads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from speechlm import runs
from speechlm.config import ConfigError

PARTS = ("encoder", "decoder")
FLAG = "--base"
# the resolved config's key of each part's model id
CONFIG_KEYS = {"encoder": "audio_model_id", "decoder": "text_model_id"}


def add_base_args(ap: argparse.ArgumentParser) -> None:
    """`--base PART=PATH`, repeatable: the folder of a base the model names as a local model."""
    ap.add_argument(
        FLAG,
        action="append",
        default=[],
        metavar="PART=PATH",
        help="the folder of a base the model was trained on as a local folder (decoder=PATH, encoder=PATH; "
        "repeatable); a checkpoint in its run folder finds them itself on the machine that trained it",
    )


def bases_from_args(args: argparse.Namespace) -> dict[str, str]:
    """{part: folder} of the `--base` flags, each checked (a known part, once, an existing folder)."""
    out: dict[str, str] = {}
    for given in getattr(args, "base", None) or []:
        part, sep, path = given.partition("=")
        if not sep or part not in PARTS or not path:
            raise ConfigError(f"{FLAG} {given}: expected PART=PATH with PART one of {', '.join(PARTS)}")
        if part in out:
            raise ConfigError(f"{FLAG} {part}= given twice")
        if not Path(path).is_dir():
            raise ConfigError(f"{FLAG} {given}: no such folder")
        out[part] = path
    return out


def _run_config(model_folder: Path) -> tuple[dict, Path] | None:
    """(the resolved config as a dict, the run folder) of a checkpoint's model folder inside a run,
    or None when the folder is not one (an export, a final folder)."""
    step = model_folder.parent
    run = step.parent.parent
    if model_folder.name != runs.MODEL or step.parent.name != runs.CHECKPOINTS:
        return None
    state = step / runs.STATE
    if state.is_file():
        try:
            cfg = json.loads(state.read_text()).get("config")
        except (OSError, ValueError):
            cfg = None
        if isinstance(cfg, dict):
            return cfg, run
    if (run / runs.RUN_CONFIG).is_file():
        import yaml

        try:
            cfg = yaml.safe_load((run / runs.RUN_CONFIG).read_text())
        except (OSError, yaml.YAMLError):
            return None
        return (cfg, run) if isinstance(cfg, dict) else None
    return None


def _candidates(model_id: str, cfg: dict, run: Path) -> list[Path]:
    """Where a local base path of the run's config may be: as written (absolute, or relative to the
    current folder), and relative to the folder the run was started from (the run folder less
    `training.output_dir/NAME`)."""
    p = Path(model_id)
    out = [p]
    if not p.is_absolute():
        output_dir = Path(str((cfg.get("training") or {}).get("output_dir") or "outputs"))
        if not output_dir.is_absolute() and ".." not in output_dir.parts:
            start = run.resolve()
            for _ in range(len(output_dir.parts) + 1):
                start = start.parent
            out.append(start / p)
    return out


def run_bases(model_folder: str | Path) -> dict[str, str]:
    """{part: folder} of the bases a checkpoint's run trained on from local folders that are on this
    machine (empty for a folder outside a run, or a base from the Hub or speechlm's ids). Only a folder
    with the recorded base's name is offered; its hash is checked where it is loaded."""
    model_folder = Path(model_folder)
    found = _run_config(model_folder)
    if found is None or not (model_folder / "config.json").is_file():
        return {}
    cfg, run = found
    try:
        refs = json.loads((model_folder / "config.json").read_text()).get("bases") or {}
    except (OSError, ValueError):
        return {}
    out = {}
    for part in PARTS:
        ref = refs.get(part) or {}
        model_id = (cfg.get("model") or {}).get(CONFIG_KEYS[part])
        if ref.get("source") != "local" or ref.get("folder") or not isinstance(model_id, str):
            continue
        for cand in _candidates(model_id, cfg, run):
            if cand.is_dir() and cand.resolve().name == ref.get("id"):
                out[part] = str(cand)
                break
    return out
