"""Where the tests find the repository: one constant, so a test file's depth under tests/ never matters.

Importable as `paths` from any test: tests/ is on sys.path (tests/conftest.py's docstring says why).
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
