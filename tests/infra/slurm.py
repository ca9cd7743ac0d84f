"""A real one-machine Slurm (Debian's slurm-wlm + munge) for the sbatch/requeue test.

Installs the packages with apt-get when missing, generates the munge key, writes slurm.conf (state,
spool, pid and log paths in a temporary dir), starts munged, slurmctld and slurmd, and stops all
three (by pid) at the end, even on failure. Every command must see SLURM_CONF (see `env`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
from pathlib import Path

from tests.infra.daemons import free_port, stop, wait_until

PACKAGES = ("slurm-wlm", "munge")
MUNGE_KEY = Path("/etc/munge/munge.key")


def available() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm test runs daemons as root"
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        return "no slurm-wlm and no apt-get to install it"
    return None


def install() -> None:
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "munged")):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env, timeout=900, stdout=subprocess.DEVNULL
    )


def _munge_key() -> None:
    if MUNGE_KEY.is_file() and MUNGE_KEY.stat().st_size >= 32:
        return
    MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("mungekey"):
        subprocess.run(["mungekey", "--create", "--force", "--keyfile", str(MUNGE_KEY)], check=True)
    else:
        MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    os.chmod(MUNGE_KEY, 0o400)


def write_conf(tmp: Path, cpus: int, kill_wait: int) -> Path:
    host = socket.gethostname().split(".")[0]
    for d in ("state", "spool"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    conf = tmp / "slurm.conf"
    conf.write_text(f"""ClusterName=speechlm-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
StateSaveLocation={tmp / "state"}
SlurmdSpoolDir={tmp / "spool"}
SlurmctldPidFile={tmp / "slurmctld.pid"}
SlurmdPidFile={tmp / "slurmd.pid"}
SlurmctldLogFile={tmp / "slurmctld.log"}
SlurmdLogFile={tmp / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait={kill_wait}
MinJobAge=600
SchedulerType=sched/builtin
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


@contextlib.contextmanager
def cluster(tmp: Path, cpus: int = 2, kill_wait: int = 60):
    """Yields the environment (os.environ + SLURM_CONF) for sbatch/squeue/scontrol. One cluster at a
    time on a host (Debian's Slurm runs one slurmd per host): a second one, from another pytest-xdist
    worker or another run, waits for the first to stop."""
    with open(HOST_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        with _cluster(tmp, cpus, kill_wait) as env:
            yield env


HOST_LOCK = "/tmp/speechlm-test-slurm.lock"


@contextlib.contextmanager
def _cluster(tmp: Path, cpus: int, kill_wait: int):
    install()
    _munge_key()
    tmp = Path(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    conf = write_conf(tmp, cpus, kill_wait)
    env = dict(os.environ, SLURM_CONF=str(conf))
    procs: list[subprocess.Popen] = []
    try:
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")

        def answers(cmd: list[str], says: str = "") -> bool:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            return r.returncode == 0 and says in r.stdout

        def start(name: str, cmd: list[str], ready: list[str], says: str, log: Path, **kw) -> None:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp / f"{name}.err", "w"), **kw))
            wait_until(lambda: answers(ready, says), 60, name, log, procs[-1], poll=0.5)

        # munged in the foreground as the munge user on the default socket (where Slurm looks);
        # a munged that already answers there is reused, not ours to stop
        if not answers(["munge", "-n"]):
            start("munged", ["munged", "-F"], ["munge", "-n"], "", tmp / "munged.err", user="munge", group="munge")
        start(
            "slurmctld",
            ["slurmctld", "-D", "-i", "-f", str(conf)],
            ["scontrol", "ping"],
            "UP",
            tmp / "slurmctld.log",
            env=env,
        )
        start(
            "slurmd",
            ["slurmd", "-D", "-f", str(conf)],
            ["sinfo", "-h", "-o", "%t"],
            "idle",
            tmp / "slurmd.log",
            env=env,
        )
        yield env
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True, timeout=20)
        for p in reversed(procs):
            stop(p, 20)
