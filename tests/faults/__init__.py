"""Fault injection helpers for tests/reliability/ (real files, real signals, real OS limits)."""
