"""Write a checkpoint as the self-contained model folder: the frozen bases inside, loads anywhere without speechlm.

speechlm export CHECKPOINT_OR_RUN OUT [--merge-lora]
(`python -m speechlm.export` takes the same arguments)
"""

from __future__ import annotations

from speechlm.config import cli_errors, command_parser

EXAMPLES = """examples:
  speechlm export outputs/RUN outputs/RUN-hf                         # a run dir means its latest checkpoint
  speechlm export outputs/RUN/checkpoints/step-2000 my-asr --merge-lora"""


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.export") -> None:
    ap = command_parser(prog, __doc__.splitlines()[0], EXAMPLES)
    ap.add_argument(
        "model", help="a checkpoint step-N, its model/ folder, a run folder (latest checkpoint) or a Hub id"
    )
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--merge-lora", action="store_true", help="merge LoRA into the decoder (and write decoder/ alone)")
    args = ap.parse_args(argv)
    from speechlm.export import write_export  # as above
    from speechlm.inference import load_model  # the model stack (torch) once the arguments parse

    print(write_export(load_model(args.model), args.out, merge_lora=args.merge_lora))


if __name__ == "__main__":
    main()
