"""Write a checkpoint as the self-contained model folder: the frozen bases inside, loads anywhere without speechlm.

speechlm export CHECKPOINT_OR_RUN OUT [--merge-lora] [--base decoder=PATH ...]
(`python -m speechlm.export` takes the same arguments)

A checkpoint of a run on local bases finds them from its run on the machine that trained it;
elsewhere `--base PART=PATH` names each (speechlm.inference.bases). OUT must not exist yet.
"""

from __future__ import annotations

from speechlm.config import cli_errors, command_parser
from speechlm.inference import add_base_args, bases_from_args

EXAMPLES = """examples:
  speechlm export outputs/RUN outputs/RUN-hf                         # a run dir means its latest checkpoint
  speechlm export outputs/RUN/checkpoints/step-2000 my-asr --merge-lora
  speechlm export copied/step-2000 my-asr --base decoder=/models/my-decoder   # a local base elsewhere"""


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.export") -> None:
    ap = command_parser(prog, __doc__.splitlines()[0], EXAMPLES)
    ap.add_argument(
        "model", help="a checkpoint step-N, its model/ folder, a run folder (latest checkpoint) or a Hub id"
    )
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--merge-lora", action="store_true", help="merge LoRA into the decoder (and write decoder/ alone)")
    add_base_args(ap)
    args = ap.parse_args(argv)
    bases = bases_from_args(args)
    from speechlm.inference import load_model  # the model stack (torch) once the arguments parse
    from speechlm.model.folder import write_export  # as above

    print(write_export(load_model(args.model, bases), args.out, merge_lora=args.merge_lora))


if __name__ == "__main__":
    main()
