"""Plots of a training run from its metrics.jsonl.

    speechlm report RUN_DIR      -> RUN_DIR/plots/{overview,loss,learning_rate,grad_norm,throughput}.png
    (`python -m speechlm.report` takes the same argument)

One glance should tell whether the loss fell in the first few hundred steps (speechlm.train.plots).
"""

from __future__ import annotations

from speechlm.config import cli_errors, command_parser

EXAMPLES = """example:
  speechlm report outputs/demo                # writes outputs/demo/plots/overview.png and one PNG per panel"""


@cli_errors
def main(argv=None, prog: str = "python -m speechlm.report"):
    ap = command_parser(prog, __doc__.split("\n")[0], EXAMPLES)
    ap.add_argument("run_dir")
    args = ap.parse_args(argv)
    from speechlm.train.plots import write_plots  # matplotlib once the arguments parse

    for p in write_plots(args.run_dir):
        print(p)


if __name__ == "__main__":
    main()
