"""Fixture for simulator tests: PIMCOMP's pimsim-nn config as an Arch (helpers: simprog.py)."""

import pytest
from simprog import pimcomp_arch


@pytest.fixture
def arch():
    return pimcomp_arch()
