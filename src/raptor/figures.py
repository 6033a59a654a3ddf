"""Writing matplotlib figures (Agg backend), shared by the simulator's heat maps and the suite's
charts."""

from __future__ import annotations

import os
from pathlib import Path


def save_figure(fig, path: Path) -> None:
    """Save a figure as PNG atomically (temporary name, then rename) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)
