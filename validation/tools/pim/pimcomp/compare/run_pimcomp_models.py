#!/usr/bin/env python3
"""Compile, validate and simulate the model suite with Raptor and pimcomp (see README.md)."""

import sys

from raptor.suite.runner import main

if __name__ == "__main__":
    sys.exit(main())
