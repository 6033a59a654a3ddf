"""PNG charts beside the suite's CSVs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def _save(fig, path: Path) -> None:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)


def comparison_chart(results, path: Path) -> None:
    """Raptor vs pimcomp per case: latency, throughput and energy (log scale), with PASS marks."""
    labels = [r.spec.key.replace("/throughput/", "/tp/") for r in results]
    metrics = [
        ("latency_ms", "latency (ms, lower is better)"),
        ("throughput_ips", "throughput (inf/s)"),
        ("energy_uj", "energy per inference (uJ)"),
    ]
    fig, axes = plt.subplots(
        len(metrics), 1, figsize=(max(6, 0.9 * len(labels) + 2), 9), squeeze=False
    )
    x = range(len(labels))
    for ax, (field, title) in zip(axes[:, 0], metrics):
        for k, (name, color) in enumerate((("raptor", "tab:blue"), ("pimcomp", "tab:orange"))):
            vals, marks = [], []
            for r in results:
                res = r.results.get(name)
                v = getattr(res, field, None) if res else None
                vals.append(v or 0.0)
                marks.append(res.status if res else "SKIPPED")
            bars = ax.bar(
                [i + (k - 0.5) * 0.4 for i in x], vals, width=0.4, color=color, label=name
            )
            for b, m in zip(bars, marks):
                if m not in ("PASS", "SKIPPED"):
                    ax.annotate(
                        m,
                        (b.get_x() + b.get_width() / 2, max(b.get_height(), 1e-9)),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color="red",
                    )
        if any(
            getattr(r.results.get(n), field, None) for r in results for n in ("raptor", "pimcomp")
        ):
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.suptitle("Raptor vs pimcomp, same chip and simulator")
    _save(fig, path)


def ablation_chart(rows: list[dict[str, str]], path: Path) -> None:
    """Signed % change from baseline per case and variant, one panel per metric.

    Hatched bars are variants whose program failed validation (their numbers describe an
    incorrect program); cases with no number (ERROR) are marked with their status.
    """
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows) if v != "baseline"]
    cases = list(dict.fromkeys(_case_label(r) for r in rows))
    metrics = ("latency", "throughput", "power", "energy")
    width = 0.8 / max(1, len(variants))
    colors = {"no-sync": "tab:red", "no-plan": "tab:green", "no-sync-no-plan": "tab:purple"}
    fig, axes = plt.subplots(
        len(metrics),
        1,
        figsize=(
            max(7, 0.9 * len(cases) * max(1, len(variants)) / 2 + 3),
            2.4 * len(metrics) + 1.5,
        ),
        squeeze=False,
        sharex=True,
    )
    handles = {}
    for ax, metric in zip(axes[:, 0], metrics):
        for k, v in enumerate(variants):
            for i, c in enumerate(cases):
                row = next((r for r in rows if r["variant"] == v and _case_label(r) == c), None)
                if row is None:
                    continue
                x = i + (k - (len(variants) - 1) / 2) * width
                if not row.get(metric):
                    ax.annotate(
                        row["functional_validation"],
                        (x, 0),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        rotation=90,
                        color="red",
                    )
                    continue
                failed = row["functional_validation"] != "PASS"
                ax.bar(
                    [x],
                    [float(row[metric].rstrip("%"))],
                    width=width,
                    color=colors.get(v, f"C{k}"),
                    hatch="//" if failed else None,
                    edgecolor="black" if failed else None,
                )
                handles.setdefault(v, Patch(color=colors.get(v, f"C{k}"), label=v))
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(f"{metric} %", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xticks(range(len(cases)))
    axes[-1, 0].set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    handles["FAIL"] = Patch(
        facecolor="white", edgecolor="black", hatch="//", label="validation FAIL"
    )
    fig.legend(
        handles=list(handles.values()),
        loc="upper center",
        ncol=len(handles),
        fontsize=9,
        bbox_to_anchor=(0.5, 0.965),
    )
    fig.suptitle(
        "Raptor ablation: % change vs baseline (hatched: validation FAIL, an incorrect program)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    _save(fig, path)


def _case_label(r: dict[str, str]) -> str:
    mode = "lat" if r["mode"] == "latency" else f"tp{r['pipeline']}"
    return f"{r['model']}/{r['arch']}/{mode}"
