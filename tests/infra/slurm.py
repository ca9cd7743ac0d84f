"""A real one-machine Slurm (Debian's slurm-wlm + munge) for the sbatch/requeue test.

Installs the packages with apt-get when missing, generates the munge key, writes slurm.conf (state,
spool, pid and log paths in a temporary dir), starts munged, slurmctld and slurmd, and stops all
three (by pid) at the end, even on failure. Every command must see SLURM_CONF (see `env`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

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
    subprocess.run(["apt-get", "install", "-y", "-qq", *PACKAGES], check=True, env=env, timeout=900,
                   stdout=subprocess.DEVNULL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
StateSaveLocation={tmp / 'state'}
SlurmdSpoolDir={tmp / 'spool'}
SlurmctldPidFile={tmp / 'slurmctld.pid'}
SlurmdPidFile={tmp / 'slurmd.pid'}
SlurmctldLogFile={tmp / 'slurmctld.log'}
SlurmdLogFile={tmp / 'slurmd.log'}
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
    """Yields the environment (os.environ + SLURM_CONF) for sbatch/squeue/scontrol."""
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
        # munged in the foreground as the munge user on the default socket (where Slurm looks);
        # a munged that already answers there is reused, not ours to stop
        if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:
            procs.append(subprocess.Popen(["munged", "-F"], user="munge", group="munge",
                                          stdout=subprocess.DEVNULL, stderr=open(tmp / "munged.err", "w")))
            _wait(lambda: subprocess.run(["munge", "-n"], capture_output=True).returncode == 0, 20, "munged", tmp / "munged.err")
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(tmp / "slurmctld.err", "w")))
        _wait(lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True).stdout.count("UP") > 0,
              60, "slurmctld", tmp / "slurmctld.log")
        procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(tmp / "slurmd.err", "w")))
        _wait(lambda: "idle" in subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout,
              60, "slurmd", tmp / "slurmd.log")
        yield env
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True, timeout=20)
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _wait(ok, timeout: float, what: str, log: Path) -> None:
    deadline = time.time() + timeout
    while not ok():
        if time.time() > deadline:
            tail = log.read_text()[-2000:] if log.is_file() else "(no log)"
            raise RuntimeError(f"{what} did not come up within {timeout:.0f} s: {tail}")
        time.sleep(0.5)
