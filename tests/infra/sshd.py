"""An sshd on 127.0.0.1:<free port>, run as root with its config, host key and client key in a
temporary dir, for the RunPod launcher's SSH round trip. Stopped (by pid) on exit, even on failure."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.infra.daemons import free_port, stop, wait_until

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class Sshd:
    host: str
    port: int
    identity: str
    known_hosts: str

    def cli_args(self) -> list[str]:
        """Connection options for launch/runpod.py."""
        return [
            self.host,
            str(self.port),
            "--identity",
            self.identity,
            "--ssh-opt",
            f"UserKnownHostsFile={self.known_hosts}",
            "--ssh-opt",
            "LogLevel=ERROR",
        ]


def available() -> str | None:
    """Why an sshd can't be started here, or None."""
    if os.geteuid() != 0:
        return "sshd test needs root"
    if not Path(SSHD).exists() or not shutil.which("ssh-keygen"):
        return "openssh-server is not installed"
    return None


@contextlib.contextmanager
def sshd(tmp: Path, env: dict[str, str] | None = None):
    tmp = Path(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o700)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "client_key.pub").read_text())
    os.chmod(tmp / "authorized_keys", 0o600)
    port = free_port()
    setenv = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host_key'}\nPidFile {tmp / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"Subsystem sftp internal-sftp\n{'SetEnv ' + setenv if setenv else ''}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation dir
    # -D: stay in the foreground so this process is the daemon and can be stopped by its pid
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "sshd.log", "w"),
    )
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, 20, "sshd", tmp / "sshd.log", proc)
        host_pub = (tmp / "host_key.pub").read_text().split()
        (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
        yield Sshd("127.0.0.1", port, str(tmp / "client_key"), str(tmp / "known_hosts"))
    finally:
        stop(proc, 10)
