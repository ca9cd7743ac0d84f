"""speechlm shard --config shards/NAME.yaml [--out DIR] [--workers N] [--overwrite]
                            [--num-tasks N --task-index I] [key=value ...]
speechlm shard merge DIR     (after all N tasks of a split build)

(`python -m speechlm.shard` takes the same arguments.)"""

from __future__ import annotations

import logging
import sys

from speechlm.config import cli_errors, command_parser
from speechlm.shard.merge import merge
from speechlm.shard.pipeline import build

EXAMPLES = """examples:
  speechlm shard --config synthetic                                  # shards/synthetic.yaml -> shards/synthetic/
  speechlm shard --config my_data.yaml --out shards/my_data          # your own data: README, "Train on your own data"
  speechlm shard --config shards/loquacious_small.yaml --workers 8   # streams the Hub's parquet files
  speechlm shard --config multiasr --out /shared/multiasr --num-tasks 4 --task-index 0   # one of 4 machines
  speechlm shard merge /shared/multiasr                              # after all 4 tasks"""


@cli_errors
def main(argv: list[str] | None = None, prog: str = "python -m speechlm.shard") -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if argv[:1] == ["merge"]:
        ap = command_parser(
            f"{prog} merge",
            "rename the tasks' tars and write the one manifest.json",
            "example:\n  speechlm shard merge /shared/multiasr",
        )
        ap.add_argument("dir", help="the --out folder every task built into")
        print(merge(ap.parse_args(argv[1:]).dir))
        return
    ap = command_parser(prog, __doc__, EXAMPLES)
    ap.add_argument("--config", required=True, help="recipe file, or the name of one in shards/")
    ap.add_argument(
        "--out",
        help="output folder (default: <the recipe's folder>/<recipe name>/: shards/NAME/ for shards/NAME.yaml, "
        "recipes/NAME/ for recipes/NAME.yaml; output.root in the recipe sets it too)",
    )
    ap.add_argument("--workers", type=int, help="worker processes (default: the recipe's, else one per core)")
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a shard set of another recipe or settings (a set whose inputs changed is rebuilt without it)",
    )
    ap.add_argument(
        "--num-tasks",
        type=int,
        default=1,
        help="split the build across N tasks (machines) by source file; then run `merge DIR`",
    )
    ap.add_argument("--task-index", type=int, default=0, help="which task this is, 0 to N-1")
    ap.add_argument("overrides", nargs="*", help="recipe overrides such as output.shard_clips=500")
    args = ap.parse_args(argv)
    out = build(
        args.config,
        args.out,
        args.workers,
        args.overrides,
        overwrite=args.overwrite,
        num_tasks=args.num_tasks,
        task_index=args.task_index,
    )
    print(out)


if __name__ == "__main__":
    main()
