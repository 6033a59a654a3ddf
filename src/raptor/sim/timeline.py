"""The timeline heat map of a traced simulation: cores x time, each cell coloured by what the core
spent most of that time bin doing (matrix, vector, transfer, memory, one of the three stalls, or
idle), so one look shows the pipeline filling, the layers moving across the chip and where cores
wait. With the run's critical path (raptor.sim.critical_path) a black line follows it across the
cores: along a core while the path is on it, up or down where it moves to the core it waited
on, so the chain that set the latency is drawn over what every core did meanwhile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from raptor.sim.trace import FLOW_SEND, KIND_CATEGORY, TRACK_STRIDE, write_chrome_trace

CLASSES = (
    "matrix",
    "vector",
    "transfer",
    "memory",
    "sync stall",
    "recv stall",
    "memory stall",
    "idle",
)
COLORS = (
    "#1f77b4",  # matrix
    "#2ca02c",  # vector
    "#9467bd",  # transfer
    "#8c564b",  # memory
    "#d62728",  # sync stall
    "#ff7f0e",  # recv stall
    "#e377c2",  # memory stall
    "#f2f2f2",  # idle
)
_KIND_CLASS = np.array([CLASSES.index(c) for c in KIND_CATEGORY])


def occupancy(
    slices: np.ndarray, cores: list[int], end_ns: float, bins: int
) -> tuple[np.ndarray, float]:
    """ns spent per (core row, time bin, class): array (len(cores), bins, len(CLASSES)) and the
    bin width. Idle is what no slice covers."""
    width = max(end_ns, 1.0) / bins
    nk = len(CLASSES)
    core = slices["track"] % TRACK_STRIDE
    keep = np.isin(core, cores)
    s, e = slices["start"][keep], slices["end"][keep]
    lookup = np.zeros(int(core.max(initial=0)) + 1, dtype=np.int64)
    lookup[np.asarray(cores, dtype=np.int64)] = np.arange(len(cores))
    r = lookup[core[keep]]
    k = _KIND_CLASS[slices["kind"][keep]]
    b0 = np.minimum((s / width).astype(np.int64), bins - 1)
    b1 = np.minimum((e / width).astype(np.int64), bins - 1)
    same = b0 == b1
    # partial bins go straight into occ, whole bins through a difference array along time
    idx = np.concatenate([(r * bins + b0) * nk + k, ((r * bins + b1) * nk + k)[~same]])
    val = np.concatenate([np.where(same, e - s, (b0 + 1) * width - s), (e - b1 * width)[~same]])
    size = len(cores) * bins * nk
    occ = np.bincount(idx, weights=val, minlength=size).reshape(len(cores), bins, nk)
    m = ~same
    didx = np.concatenate(
        [(r[m] * (bins + 1) + b0[m] + 1) * nk + k[m], (r[m] * (bins + 1) + b1[m]) * nk + k[m]]
    )
    dval = np.concatenate([np.full(m.sum(), width), np.full(m.sum(), -width)])
    diff = np.bincount(didx, weights=dval, minlength=len(cores) * (bins + 1) * nk)
    occ += np.cumsum(diff.reshape(len(cores), bins + 1, nk), axis=1)[:, :bins, :]
    # with rob_size > 1 a core's tracks overlap: count each class at most once per bin
    np.minimum(occ, width, out=occ)
    busy = occ[:, :, :-1].sum(axis=2)
    occ[:, :, -1] = np.maximum(0.0, width - busy)
    return occ, width


def path_line(segments: list[dict], cores: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(time ms, core row) vertices of the critical path's line on the heat map: each segment a
    horizontal run on its core's row, joined by vertical steps where the path changes core.
    Segments on cores without a row (no program) are left out."""
    row = {c: i for i, c in enumerate(cores)}
    xs: list[float] = []
    ys: list[float] = []
    for g in segments:
        r = row.get(g["core"])
        if r is None:
            continue
        xs += [g["start_ns"] / 1e6, g["end_ns"] / 1e6]
        ys += [r, r]
    return np.asarray(xs), np.asarray(ys, dtype=float)


def timeline_png(
    report, path: str | Path, title: str = "", bins: int = 1000, crit: dict | None = None
) -> Path:
    """Write the heat map of a traced SimReport as a PNG (atomically); with `crit` (the run's
    critical path, raptor.sim.critical_path) its line is drawn over the heat map."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from raptor.figures import save_figure

    slices = report.trace.arrays()
    cores = [c.core for c in report.per_core if c.instructions]
    end = max(report.deadlines_ns) if report.deadlines_ns else 0.0
    occ, width = occupancy(slices, cores, end, bins)
    cls = occ.argmax(axis=2)
    height = min(12.0, 2.0 + 0.045 * len(cores))
    fig, ax = plt.subplots(figsize=(13, height))
    ax.imshow(
        cls,
        aspect="auto",
        interpolation="nearest",
        cmap=ListedColormap(COLORS),
        vmin=-0.5,
        vmax=len(CLASSES) - 0.5,
        extent=(0, end / 1e6, len(cores) - 0.5, -0.5),
    )
    handles = []
    if crit and crit.get("segments"):
        xs, ys = path_line(crit["segments"], cores)
        (line,) = ax.plot(xs, ys, color="black", lw=0.9, label="critical path")
        handles.append(line)
    if report.mode == "throughput":
        for r, d in enumerate(report.deadlines_ns):
            ax.axvline(d / 1e6, color="black", lw=0.8, ls="--")
            ax.text(
                d / 1e6,
                -0.5,
                f"input {r} done ",
                va="top",
                ha="right",
                fontsize=7,
                bbox=dict(facecolor="white", edgecolor="none", pad=1),
            )
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel(f"core ({len(cores)} with a program, in id order)")
    ticks = np.linspace(0, len(cores) - 1, min(len(cores), 12)).round().astype(int)
    ax.set_yticks(ticks)
    ax.set_yticklabels([str(cores[i]) for i in ticks])
    share = occ.sum(axis=(0, 1))
    share = share / max(share.sum(), 1e-30)
    ax.legend(
        handles=[
            Patch(color=COLORS[i], label=f"{c} {100 * share[i]:.1f}%")
            for i, c in enumerate(CLASSES)
        ]
        + handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.08),
        ncol=len(CLASSES) + len(handles),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(
        (title + "\n" if title else "")
        + f"what each core does ({report.mode}, latency {report.latency_ns / 1e6:.3f} ms; "
        f"bin {width / 1e3:.1f} us, coloured by its largest share)",
        fontsize=10,
    )
    path = Path(path)
    save_figure(fig, path)
    return path


def gantt_png(
    report,
    path: str | Path,
    cores: list[int],
    start_ns: float,
    end_ns: float,
    title: str = "",
    layer_names: dict[int, str] | None = None,
) -> Path:
    """A zoomed timeline of a traced run, drawn as a viewer such as Perfetto shows it: one row per
    core, a bar per slice coloured by class, and an arrow per send->recv / sync->wait flow whose
    two ends are on the shown cores inside the window. `layer_names` labels rows (core -> text)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from raptor.figures import save_figure

    s = report.trace.arrays()
    row = {c: i for i, c in enumerate(cores)}
    core = s["track"] % TRACK_STRIDE
    m = np.isin(core, cores) & (s["end"] > start_ns) & (s["start"] < end_ns)
    fig, ax = plt.subplots(figsize=(13, 1.2 + 0.42 * len(cores)))
    scale = 1e3  # ns -> us
    for c in cores:
        sel = m & (core == c)
        if not sel.any():
            continue
        k = _KIND_CLASS[s["kind"][sel]]
        a = np.maximum(s["start"][sel], start_ns) / scale
        b = np.minimum(s["end"][sel], end_ns) / scale
        ax.broken_barh(
            list(zip(a.tolist(), (b - a).tolist())),
            (row[c] - 0.38, 0.76),
            facecolors=[COLORS[i] for i in k],
            linewidth=0,
        )
    for kind, src, t_src, dst, t_dst in report.trace.flows:
        src, dst = src % TRACK_STRIDE, dst % TRACK_STRIDE
        if src in row and dst in row and start_ns <= t_src and t_dst <= end_ns:
            ax.annotate(
                "",
                xy=(t_dst / scale, row[dst]),
                xytext=(t_src / scale, row[src]),
                arrowprops=dict(
                    arrowstyle="->",
                    lw=0.7,
                    color="black" if kind == FLOW_SEND else "#555555",
                    ls="-" if kind == FLOW_SEND else ":",
                ),
            )
    ax.set_ylim(len(cores) - 0.5, -0.5)
    ax.set_xlim(start_ns / scale, end_ns / scale)
    ax.set_yticks(range(len(cores)))
    names = layer_names or {}
    ax.set_yticklabels([f"core {c}" + (f" {names[c]}" if c in names else "") for c in cores])
    ax.set_xlabel("simulated time (us)")
    handles = [Patch(color=COLORS[i], label=c) for i, c in enumerate(CLASSES[:-1])]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title or "timeline (arrows: send->recv solid, sync->wait dotted)", fontsize=10)
    path = Path(path)
    save_figure(fig, path)
    return path


def trace_title(meta: dict, mode: str) -> str:
    """The title of a run's trace and heat map: compiler, architecture and mode."""
    return f"{meta.get('compiler', '')} {meta.get('arch', '')} {mode}".strip()


def save_trace(
    report, meta: dict, path: str | Path, png: str | Path | None = None, crit: dict | None = None
) -> str:
    """Write the trace JSON of a traced run to `path` and its heat map (raptor.sim.timeline) to
    `png` (default: `path` with .png), with the run's critical path `crit` drawn over it when
    given; returns a one-line summary."""
    path = Path(path)
    title = trace_title(meta, report.mode)
    s = write_chrome_trace(report, meta, path, title)
    png = timeline_png(report, Path(png) if png else path.with_suffix(".png"), title, crit=crit)
    return (
        f"trace: {path} ({s['bytes'] / 1e6:.1f} MB, {s['slices']} slices, {s['flows']} flows"
        f"{', capped' if s['capped'] else ''}), heat map: {png}"
    )
