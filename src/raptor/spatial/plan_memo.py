"""The plan a compile chose, kept on disk so that another compile of the same model, chip and
planning options takes it instead of comparing candidate plans again.

With the NoC dataflow the compiler (raptor.compiler._plan) runs the planning pass several times
(pixel chunks or contiguous ranges, then window-packing rounds) and orders the messages of every
candidate, an execution on estimated times; that comparison is most of a compile. What it
decides is a `PlanRecipe`: whether the winning plan has pixel chunks (and whether those of the
layers with rows enough are whole output rows), the layer windows its
placement packed by (None: packed by total load), the share of the crossbars its replication
bought (and whether the rest then bought replicas of the slowest layer), the row-group size of
its layers of few pixels (raptor.options.SMALL_LAYER_PIXELS), how finely its vector layers are
split (raptor.options.VECTOR_SPLIT), and the estimate of
every candidate (the compile report's `plan_estimates_ns`). The planning pass given the recipe's
fields rebuilds exactly the winning plan, so a compile that finds its recipe here writes the
same program and report, minus the comparison's time.

The candidates are compared before synchronization (their message orders run without tokens), and
the key leaves `--pim-disable-synchronization` out: the synchronization ablation's `no-sync`
variant compiles the plan of `baseline` (and an ablation thereby compares the same placement with
and without tokens). A latency compile then simulates its finalists (raptor.options.FINALISTS)
as compiled, tokens included, so without the memo a `no-sync` compile can keep the other
finalist where tokens decide between them; the ablation runs `baseline` first. The key covers
everything else the plan depends on: the model file and compiler code (the frontend cache's key,
raptor.frontend.cache), the architecture and every other compile option. A memo exists only
where the frontend cache does (the suite runner's fast path, under the model's
artifacts/common); files are written to a temporary name and renamed, and a memo that cannot be
read or written only costs the comparison.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from raptor.arch import Arch
from raptor.options import VECTOR_SPLIT, CompileOptions

MEMO_DIR = "plans"
FORMAT = 9


@dataclass(frozen=True)
class PlanRecipe:
    """What the planning comparison decided (module docstring)."""

    chunks: bool
    windows: dict[int, tuple[float, float]] | None
    estimates: dict[str, float]
    crossbar_share: float = 1.0
    fill_slowest: bool = False
    small_tiles: int = 0  # row tiles per group of the layers of few pixels (0: as the others)
    label: str = ""  # the plan's name in `estimates` (the compile report's `plan_kept`)
    pack: int = 0  # pixels per remainder mvmul (0: the first of the options' pack_pixels)
    row_chunks: bool = False  # the chunks of the layers with rows enough are whole output rows
    order_delay: bool = False  # packed by layer-order delays (raptor.compiler._repack)
    vector_split: int = VECTOR_SPLIT  # vector layers split to 1/N of the slowest GEMM node
    host_chunks: int = 1  # chunks per replica of the layer reading host rows (planning)

    def to_json(self) -> dict:
        windows = None
        if self.windows is not None:
            windows = {str(k): [a, b] for k, (a, b) in self.windows.items()}
        return {
            "format": FORMAT,
            "chunks": self.chunks,
            "windows": windows,
            "estimates": self.estimates,
            "crossbar_share": self.crossbar_share,
            "fill_slowest": self.fill_slowest,
            "small_tiles": self.small_tiles,
            "label": self.label,
            "pack": self.pack,
            "row_chunks": self.row_chunks,
            "order_delay": self.order_delay,
            "vector_split": self.vector_split,
            "host_chunks": self.host_chunks,
        }

    @staticmethod
    def from_json(d: dict) -> PlanRecipe:
        if d.get("format") != FORMAT:
            raise ValueError("another memo format")
        w = d["windows"]
        windows = None if w is None else {int(k): (float(a), float(b)) for k, (a, b) in w.items()}
        estimates = {str(k): float(v) for k, v in d["estimates"].items()}
        share, fill = float(d["crossbar_share"]), bool(d["fill_slowest"])
        small, label, pack = int(d["small_tiles"]), str(d["label"]), int(d["pack"])
        rows, delay, split = bool(d["row_chunks"]), bool(d["order_delay"]), int(d["vector_split"])
        return PlanRecipe(
            bool(d["chunks"]),
            windows,
            estimates,
            share,
            fill,
            small,
            label,
            pack,
            rows,
            delay,
            split,
            int(d["host_chunks"]),
        )


@dataclass(frozen=True)
class PlanMemo:
    """The memo file of one (model, code, architecture, options) key."""

    path: Path

    def get(self) -> PlanRecipe | None:
        try:
            return PlanRecipe.from_json(json.loads(self.path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, recipe: PlanRecipe) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(recipe.to_json(), f)
            os.replace(tmp, self.path)
        except OSError:
            return


def plan_memo(model: object, arch: Arch, opts: CompileOptions) -> PlanMemo | None:
    """The memo of compiling `model` for `arch` under `opts`: None unless `model` is a
    frontend-cached model file (raptor.frontend.cache.CachedModel), whose cache directory holds
    it."""
    from raptor.frontend.cache import CachedModel

    if not isinstance(model, CachedModel):
        return None
    parts = (
        f"format={FORMAT}",
        f"model={model.key()}",
        f"arch={arch!r}",
        f"options={replace(opts, disable_synchronization=False)!r}",
    )
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return PlanMemo(Path(model.cache_dir) / MEMO_DIR / f"{key}.json")
