"""Recipes that cannot do what was asked, said at start: a run shorter than its CTC warm start (the LM
never trains), a warm-up longer than the run, Hub models or a Hub push with the Hub switched off."""

from __future__ import annotations

import logging
import os

from speechlm.config import Config, ConfigError
from speechlm.model import ids

log = logging.getLogger("speechlm.train")

SETTLING_STEPS = 10  # a phase's first steps: large grad norms there are expected, not spikes


def settling(step: int, ctc_warmup_steps: int) -> bool:
    """Whether optimizer step `step` (1-based) is among the first SETTLING_STEPS of its phase (the
    CTC warm start from step 1, the LM phase from ctc_warmup_steps + 1)."""
    start = ctc_warmup_steps if 0 < ctc_warmup_steps < step else 0
    return step - start <= SETTLING_STEPS


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")


def schedule_warnings(cfg: Config, total_steps: int) -> list[str]:
    """What a run of `total_steps` optimizer steps will not do that its recipe suggests it will."""
    t, out = cfg.training, []
    if t.ctc_warmup_steps > 0 and total_steps <= t.ctc_warmup_steps:
        out.append(
            f"the run's {total_steps} steps are all within training.ctc_warmup_steps={t.ctc_warmup_steps}: only the "
            "projector trains (by CTC); the LM loss and LoRA never do, so the model will not transcribe. Set "
            f"training.ctc_warmup_steps below the run's length (e.g. training.ctc_warmup_steps={total_steps * 3 // 4})"
        )
    elif t.ctc_warmup_steps == 0 and t.warmup_steps >= total_steps:
        out.append(
            f"training.warmup_steps={t.warmup_steps} is not shorter than the run's {total_steps} steps: the learning "
            "rate never reaches its peak and never decays (set training.warmup_steps to about a tenth of the run, "
            f"e.g. {max(1, total_steps // 10)})"
        )
    return out


def warn_schedule(cfg: Config, total_steps: int) -> None:
    for line in schedule_warnings(cfg, total_steps):
        log.warning("%s", line)


def offline_hint(model_id: str) -> str:
    """For a Hub id that speechlm converts offline: the `offline/` id to use instead."""
    from speechlm.model.pretrained import HUB_IDS, PREFIX  # the offline conversions' names

    twin = {hub: PREFIX + name for name, hub in HUB_IDS.items()}.get(model_id)
    return f" (offline, its weights come from the registry as '{twin}': --config demo uses them)" if twin else ""


def check_hub(cfg: Config) -> None:
    """With HF_HUB_OFFLINE set, a Hub push cannot succeed: said at start (each upload then fails and
    is retried, and training goes on)."""
    if cfg.training.push_to_hub and hub_offline():
        log.warning(
            "training.push_to_hub: true, but HF_HUB_OFFLINE is set, so every upload will fail "
            "(set training.push_to_hub=false, or unset HF_HUB_OFFLINE)"
        )


def explain_offline(e: ConfigError, cfg: Config) -> ConfigError:
    """A model that can't be read with the Hub off, with the offline id that would work."""
    if not hub_offline():
        return e
    for model_id in (cfg.model.audio_model_id, cfg.model.text_model_id):
        if not ids.is_speechlm_id(model_id) and f"'{model_id}'" in str(e):
            first = str(e).splitlines()[0]
            return ConfigError(f"{first}; HF_HUB_OFFLINE is set and '{model_id}' is a Hub id{offline_hint(model_id)}")
    return e
