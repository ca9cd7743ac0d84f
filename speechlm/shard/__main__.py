"""python -m speechlm.shard --config shards/NAME.yaml [--out DIR] [--workers N] [--overwrite] [key=value ...]"""
from __future__ import annotations

import argparse
import logging
import sys

from speechlm.config import cli_errors
from speechlm.shard.pipeline import build


@cli_errors
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m speechlm.shard", description=__doc__)
    ap.add_argument("--config", required=True, help="recipe file, or the name of one in shards/")
    ap.add_argument("--out", help="output folder (default: shards/<recipe name>/ beside the recipe)")
    ap.add_argument("--workers", type=int, help="worker processes (default: the recipe's, else one per core)")
    ap.add_argument("--overwrite", action="store_true", help="replace a shard set built from other settings")
    ap.add_argument("overrides", nargs="*", help="recipe overrides such as output.shard_clips=500")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    out = build(args.config, args.out, args.workers, args.overrides, overwrite=args.overwrite)
    print(out)


if __name__ == "__main__":
    main()
