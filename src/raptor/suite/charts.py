"""PNG charts beside the suite's CSVs (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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
    """Signed % change from baseline per case and variant, one panel per metric; FAIL rows hatched."""
    variants = [v for v in dict.fromkeys(r["variant"] for r in rows) if v != "baseline"]
    cases = list(dict.fromkeys(_case_label(r) for r in rows))
    metrics = ("latency", "throughput", "power", "energy")
    fig, axes = plt.subplots(
        len(metrics),
        1,
        figsize=(max(6, 0.8 * len(cases) * max(1, len(variants)) / 2 + 3), 11),
        squeeze=False,
    )
    width = 0.8 / max(1, len(variants))
    colors = ["tab:red", "tab:green", "tab:purple", "tab:brown"]
    for ax, metric in zip(axes[:, 0], metrics):
        for k, v in enumerate(variants):
            xs, ys, hatches = [], [], []
            for i, c in enumerate(cases):
                row = next((r for r in rows if r["variant"] == v and _case_label(r) == c), None)
                if row is None or not row.get(metric):
                    continue
                xs.append(i + (k - (len(variants) - 1) / 2) * width)
                ys.append(float(row[metric].rstrip("%")))
                hatches.append(row["functional_validation"] != "PASS")
            bars = ax.bar(xs, ys, width=width, color=colors[k % len(colors)], label=v)
            for b, h in zip(bars, hatches):
                if h:
                    b.set_hatch("//")
                    b.set_edgecolor("black")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(
            f"{metric}: % change vs baseline (hatched = validation FAIL: incorrect program)",
            fontsize=9,
        )
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.suptitle("Raptor ablation: synchronization and spatial planning")
    _save(fig, path)


def _case_label(r: dict[str, str]) -> str:
    mode = "lat" if r["mode"] == "latency" else f"tp{r['pipeline']}"
    return f"{r['model']}/{r['arch']}/{mode}"
