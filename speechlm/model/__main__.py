"""speechlm model --count [--config RECIPE] [--experiment NAME] [key=value ...]
(`python -m speechlm.model` takes the same arguments)

Builds the configured model on the meta device (no weights, no downloads: hub ids that aren't in
the local cache fall back to the bundled configs in speechlm/model/configs/) and prints parameter
counts per part: encoder, projector, decoder, LoRA.
"""

from __future__ import annotations

import argparse
import os

import torch
from peft import get_peft_model

from speechlm import config as C
from speechlm.model import encoders, parts
from speechlm.model.build import lora_config, trainable_parts
from speechlm.model.hfconfig import text_config
from speechlm.model.projector import Projector
from speechlm.model.speechlm import format_table


def meta_counts(cfg: C.Config) -> dict:
    mcfg = cfg.model
    trainable = trainable_parts(mcfg, cfg.training)
    family = encoders.family_for(mcfg.audio_model_id, allow_bundled=True)
    encoder = family.meta_encoder()
    decoder = parts.meta_decoder(mcfg.text_model_id, mcfg.trust_remote_code)
    counts = {}
    n_enc = sum(p.numel() for p in encoder.parameters())
    counts["encoder"] = (n_enc, n_enc if trainable["encoder"] else 0)
    with torch.device("meta"):
        proj = Projector(
            family.hidden_size,
            text_config(decoder.config).hidden_size,
            mcfg.projector_hidden_dim,
            mcfg.projector_pool_stride,
        )
    n_proj = sum(p.numel() for p in proj.parameters())
    counts["projector"] = (n_proj, n_proj if trainable["projector"] else 0)
    n_dec = sum(p.numel() for p in decoder.parameters())
    n_emb = decoder.get_input_embeddings().weight.numel()
    dec_train = (
        n_dec - (0 if trainable["embed_tokens"] else n_emb)
        if trainable["decoder"]
        else (n_emb if trainable["embed_tokens"] else 0)
    )
    counts["decoder"] = (n_dec, dec_train)
    n_lora = 0
    if trainable["lora"]:
        peft_model = get_peft_model(decoder, lora_config(mcfg))
        n_lora = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    counts["lora"] = (n_lora, n_lora)
    return counts


EXAMPLES = """examples:
  speechlm model --count                            # the production model's parameters per part
  speechlm model --count --config small model.lora_rank=32"""


@C.cli_errors
def main(argv=None, prog: str = "python -m speechlm.model") -> None:
    ap = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.splitlines()[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--config", default=None, help="recipe name or YAML path (default: production)")
    ap.add_argument("--experiment", default=None)
    ap.add_argument("--count", action="store_true", help="print parameter counts (meta device, no downloads)")
    ap.add_argument("overrides", nargs="*", help="key.sub=value")
    args = ap.parse_args(argv)
    if not args.count:
        ap.error("nothing to do: pass --count")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = C.load(C.Config, args.config, args.experiment, args.overrides)
    print(
        f"encoder {cfg.model.audio_model_id} | decoder {cfg.model.text_model_id} | "
        f"projector hidden {cfg.model.projector_hidden_dim} stride {cfg.model.projector_pool_stride} | "
        f"LoRA r{cfg.model.lora_rank}/alpha{cfg.model.lora_alpha} {cfg.model.lora_target_modules}"
    )
    print(format_table(meta_counts(cfg)))


if __name__ == "__main__":
    main()
