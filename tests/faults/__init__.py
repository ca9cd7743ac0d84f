"""Fault injection helpers for tests/test_reliability*.py (real files, real signals, real OS limits)."""
