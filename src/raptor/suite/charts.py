"""PNG charts beside the suite's CSVs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
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
    incorrect program); cases with no number (ERROR) are marked with their status. A change too
    small for its bar to show (0.00 %, or under 1 % of the panel's largest change) gets a diamond
    at its value (half white when the program failed validation), so a variant equal to the
    baseline is seen, not only listed in the legend.
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
    diamonds: set[bool] = set()  # the validation failed flag of each change drawn so
    for ax, metric in zip(axes[:, 0], metrics):
        values = [float(r[metric].rstrip("%")) for r in rows if r.get(metric)]
        tiny = 0.01 * max((abs(x) for x in values), default=0.0)
        for k, v in enumerate(variants):
            for i, c in enumerate(cases):
                row = next((r for r in rows if r["variant"] == v and case_label(r) == c), None)
                if row is None:
                    continue
                x = i + (k - (len(variants) - 1) / 2) * width
                if not row.get(metric):
                    ax.annotate(  # mid-height: inside the panel whatever the sign of its range
                        row["functional_validation"],
                        (x, 0.5),
                        xycoords=("data", "axes fraction"),
                        ha="center",
                        va="center",
                        fontsize=7,
                        rotation=90,
                        color="red",
                    )
                    continue
                failed = row["functional_validation"] != "PASS"
                value = float(row[metric].rstrip("%"))
                color = colors.get(v, f"C{k}")
                ax.bar(
                    [x],
                    [value],
                    width=width,
                    color=color,
                    hatch="//" if failed else None,
                    edgecolor="black" if failed else None,
                )
                if abs(value) <= tiny:
                    diamonds.add(failed)
                    ax.plot(
                        [x],
                        [value],
                        marker="D",
                        markersize=6,
                        color=color,
                        markeredgecolor="black",
                        markeredgewidth=0.6,
                        fillstyle="bottom" if failed else "full",
                        markerfacecoloralt="white",
                        linestyle="none",
                        zorder=3,
                        clip_on=False,  # a zero on the panel's edge shows whole
                    )
                handles.setdefault(v, Patch(color=color, label=v))
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(f"{metric} %", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xticks(range(len(cases)))
    axes[-1, 0].set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
    # every case's full slot: a status mark with no bar beside it is still inside the axes
    axes[-1, 0].set_xlim(-0.5, len(cases) - 0.5)
    handles["FAIL"] = Patch(
        facecolor="white", edgecolor="black", hatch="//", label="validation FAIL"
    )
    if diamonds:
        handles["small"] = Line2D(
            [],
            [],
            marker="D",
            markersize=6,
            color="gray",
            markeredgecolor="black",
            markeredgewidth=0.6,
            linestyle="none",
            label="about 0 % (bar too short to see"
            + ("; half white: FAIL)" if True in diamonds else ")"),
        )
    fig.legend(
        handles=list(handles.values()),
        loc="upper center",
        ncol=min(len(handles), 3),
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
