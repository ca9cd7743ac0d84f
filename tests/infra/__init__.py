"""Real daemons for the end-to-end launcher tests (sshd, a one-machine Slurm), started and stopped
by the tests themselves."""
