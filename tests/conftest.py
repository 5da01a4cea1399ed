"""Shared pytest setup: make the collection importable as ansible_collections.gpusplit.k8s."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / ".collections"

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
