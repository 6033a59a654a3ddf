#!/usr/bin/env python3
"""Raptor synchronization / spatial-planning ablation (see README.md beside this file)."""

import sys
from pathlib import Path

from raptor.suite.ablation import main

RUNNER = Path(__file__).resolve().parents[1] / "pimcomp" / "compare" / "run_pimcomp_models.py"

if __name__ == "__main__":
    sys.exit(main(runner_script=RUNNER))
