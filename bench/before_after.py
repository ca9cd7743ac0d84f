"""Two checkouts side by side: bench/train.py's speechlm trainer (median step) and bench/reader.py, in
alternating order per round, so the machine's drift hits both alike. Used for the #23 redesign:

    git worktree add /work/wt-before 1f72d59; git worktree add /work/wt-after a92ca07
    OMP_NUM_THREADS=1 python bench/before_after.py 2
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

TREES = {"before 1f72d59": "/work/wt-before", "after a92ca07": "/work/wt-after"}
PY = sys.executable
env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
res = {k: {"train": [], "reader": []} for k in TREES}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    order = list(TREES.items()) if r % 2 == 0 else list(TREES.items())[::-1]
    for name, tree in order:
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run(
                [PY, "bench/train.py", "--child", "speechlm", "--steps", "30", "--out", out],
                cwd=tree,
                env={**env, "PYTHONPATH": tree},
                capture_output=True,
                text=True,
            )
            line = [x for x in p.stdout.splitlines() if x.startswith("BENCH ")]
            if not line:
                sys.exit(p.stderr[-3000:])
            t = json.loads(line[0][6:])["times"][5:]
            res[name]["train"].append(statistics.median(t))
        p = subprocess.run(
            [PY, "bench/reader.py", "--clips", "240", "--repeats", "1", "--plan-clips", "10000"],
            cwd=tree,
            env={**env, "PYTHONPATH": tree},
            capture_output=True,
            text=True,
        )
        res[name]["reader"].append(p.stdout)
        print(name, r, res[name]["train"][-1], flush=True)
        print(p.stdout, p.stderr[-500:] if p.returncode else "", flush=True)
for name in TREES:
    rounds = [round(1000 * x, 1) for x in res[name]["train"]]
    print(name, "trainer median step per round (ms):", rounds)
