"""pimsim-nn parity tests (see parity_micro.py). They need ChipTest in $PIMSIM_NN_BIN (.ci/run
builds it from ../shared/tools/build-pimsim-nn.sh); those that compare with our engine need
raptor.sim."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
