"""PNG charts beside the suite's CSVs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from raptor.figures import save_figure  # noqa: E402


def comparison_chart(results, path: Path) -> None:
    """Raptor vs pimcomp per case: latency, throughput, energy (linear, from 0) and, when both
    compilers ran, the Raptor/pimcomp ratios against PIMCOMP's own margins (2.4x, 1.6x)."""
    labels = [r.spec.key.replace("/throughput/", "/tp/") for r in results]
    metrics = [
        ("latency_ms", "latency ms\n(lower better)"),
        ("throughput_ips", "throughput\ninf/s"),
        ("energy_uj", "energy uJ\nper inference"),
    ]
    both = any(
        r.results.get("pimcomp")
        and r.results["pimcomp"].latency_ms
        and r.results.get("raptor")
        and r.results["raptor"].latency_ms
        for r in results
    )
    n = len(metrics) + (1 if both else 0)
    fig, axes = plt.subplots(
        n, 1, figsize=(max(7, 0.9 * len(labels) + 2), 2.3 * n + 1.5), squeeze=False, sharex=True
    )
    x = list(range(len(labels)))
    colors = {"raptor": "tab:blue", "pimcomp": "tab:orange"}
    for ax, (field, title) in zip(axes[:, 0], metrics):
        for k, name in enumerate(colors):
            for i, r in enumerate(results):
                res = r.results.get(name)
                v = getattr(res, field, None) if res else None
                xi = i + (k - 0.5) * 0.4
                if v:
                    ax.bar([xi], [v], width=0.4, color=colors[name])
                status = res.status if res else "SKIPPED"
                if status != "PASS":
                    ax.annotate(
                        status,
                        (xi, (v or 0)),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        rotation=90,
                        color="red" if status in ("FAIL", "ERROR") else "gray",
                    )
        ax.set_ylabel(title, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
    if both:
        ax = axes[-1, 0]
        for k, (field, target, name) in enumerate(
            (("latency_ms", 2.4, "latency speedup"), ("throughput_ips", 1.6, "throughput ratio"))
        ):
            vals = []
            for r in results:
                ra, pc = r.results.get("raptor"), r.results.get("pimcomp")
                a, b = (
                    (getattr(ra, field, None) if ra else None),
                    (getattr(pc, field, None) if pc else None),
                )
                vals.append((b / a if field == "latency_ms" else a / b) if a and b else 0.0)
            ax.bar(
                [i + (k - 0.5) * 0.4 for i in x],
                vals,
                width=0.4,
                color=f"C{k + 2}",
                label=f"{name} (target {target}x)",
            )
            ax.axhline(target, color=f"C{k + 2}", linestyle="--", linewidth=0.8)
        ax.axhline(1, color="black", linewidth=0.8)
        ax.set_ylabel("Raptor / pimcomp", fontsize=9)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xticks(x)
    axes[-1, 0].set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    handles = [Patch(color=c, label=n) for n, c in colors.items()]
    fig.legend(handles=handles, loc="upper center", ncol=2, fontsize=9, bbox_to_anchor=(0.5, 0.965))
    fig.suptitle("Raptor vs pimcomp on the same chip and simulator", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    save_figure(fig, path)


def ablation_chart(rows: list[dict[str, str]], path: Path) -> None:
    """Signed % change from baseline per case and variant, one panel per metric.

    Hatched bars are variants whose program failed validation (their numbers describe an
    incorrect program); cases with no number (ERROR) are marked with their status.
    """
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows) if v != "baseline"]
    cases = list(dict.fromkeys(case_label(r) for r in rows))
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
                row = next((r for r in rows if r["variant"] == v and case_label(r) == c), None)
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
    save_figure(fig, path)


def case_label(r: dict[str, str]) -> str:
    """Short case name of a CSV row: model/arch/lat or model/arch/tpN."""
    mode = "lat" if r["mode"] == "latency" else f"tp{r['pipeline']}"
    return f"{r['model']}/{r['arch']}/{mode}"
