"""speechlm model --count [--config RECIPE] [--experiment NAME] [key=value ...]
(`python -m speechlm.model` takes the same arguments)

Builds the configured model on the meta device as the planner does (speechlm.model.meta: no
weights, no downloads: hub ids that aren't in the local cache fall back to the bundled configs in
speechlm/model/configs/) and prints parameter counts per part: encoder, projector, decoder, LoRA.
"""

from __future__ import annotations

import os

from speechlm import config as C
from speechlm.model.meta import meta_speechlm

EXAMPLES = """examples:
  speechlm model --count                            # the production model's parameters per part
  speechlm model --count --config small model.lora_rank=32"""


@C.cli_errors
def main(argv=None, prog: str = "python -m speechlm.model") -> None:
    ap = C.command_parser(prog, __doc__.splitlines()[0], EXAMPLES)
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
    print(meta_speechlm(cfg).parameter_table())


if __name__ == "__main__":
    main()
