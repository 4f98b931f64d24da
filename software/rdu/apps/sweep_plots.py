"""Plots of a sweep's results table (``rdu sweep --plot``; matplotlib, the ``plots`` extra).

* ``utilization-<kernel>.png``: utilisation over rows x columns, one panel per kernel
  (each cell the mean over that geometry's points, with their count);
* ``cycles-<kernel>.png``: cycles against problem size (the product of the kernel's
  shape parameters: M N K for a GEMM, M N for softmax), one line per machine;
* ``roofline-<kernel>.png``: the achieved share of the roofline (``roofline_share``:
  the bound over the measured cycles, :mod:`rdu.roofline`) against problem size, one
  line per machine, each point marked with what binds (``o`` compute, ``s`` HBM).

All three come from the rows that have cycles: the RTL tiers' (``verilator``,
``native``, ``ip``), with status ``ok``. ``traffic-<kernel>.png``: HBM bytes against
problem size per machine, from every ``ok`` row (the functional model measures traffic
too).
"""

from collections import defaultdict
from pathlib import Path

from ..frontend.kernels import KERNELS
from .sweep import SweepError, read_table

__all__ = ["plot_table"]


def _pyplot():
    try:
        import matplotlib  # the 'plots' extra
    except ImportError:
        raise SweepError("rdu sweep --plot needs matplotlib: pip install "
                         "'rdu-sim[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _size(row, params):
    size = 1
    for name in params:
        size *= row[name]
    return size


def _machine_label(row):
    return (f"{row['rows']}x{row['cols']} l{row['lanes']} {row['pmu_kib']}KiB "
            f"{row['agcus']}AGCU")


def plot_table(table, directory):
    """Write the plots of ``table`` into ``directory``; return their paths."""
    plt = _pyplot()
    rows = [row for row in read_table(table) if row["status"] == "ok"]
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for kernel in sorted({row["kernel"] for row in rows}):
        params = KERNELS[kernel].params
        mine = [row for row in rows if row["kernel"] == kernel]
        timed = [row for row in mine if row["cycles"] is not None]
        if timed:
            written.append(_utilization(plt, kernel, timed, directory))
            written.append(_versus_size(plt, kernel, params, timed, "cycles", "cycles",
                                        directory / f"cycles-{kernel}.png"))
            written.append(_roofline(plt, kernel, params, timed,
                                     directory / f"roofline-{kernel}.png"))
        written.append(_versus_size(plt, kernel, params, mine, "hbm_bytes",
                                    "HBM bytes (execution)",
                                    directory / f"traffic-{kernel}.png"))
    return written


def _utilization(plt, kernel, rows, directory):
    cells = defaultdict(list)
    for row in rows:
        if row["utilization"] is not None:
            cells[row["rows"], row["cols"]].append(row["utilization"])
    grid_rows = sorted({r for r, _ in cells})
    grid_cols = sorted({c for _, c in cells})
    values = [[(sum(cells[r, c]) / len(cells[r, c])) if cells.get((r, c)) else float("nan")
               for c in grid_cols] for r in grid_rows]
    figure, axes = plt.subplots(figsize=(1.6 + 1.3 * len(grid_cols),
                                         1.4 + 1.0 * len(grid_rows)))
    image = axes.imshow(values, origin="lower", cmap="viridis", vmin=0,
                        vmax=max(1e-9, max((v for line in values for v in line
                                            if v == v), default=1)))
    axes.set_xticks(range(len(grid_cols)), [str(c) for c in grid_cols])
    axes.set_yticks(range(len(grid_rows)), [str(r) for r in grid_rows])
    axes.set_xlabel("columns")
    axes.set_ylabel("rows")
    for i, r in enumerate(grid_rows):
        for j, c in enumerate(grid_cols):
            if cells.get((r, c)):
                axes.text(j, i, f"{values[i][j]:.3f}\n({len(cells[r, c])} pts)",
                          ha="center", va="center", color="white", fontsize=8)
    axes.set_title(f"{kernel}: mean utilisation (RTL)")
    figure.colorbar(image, ax=axes)
    figure.tight_layout()
    path = directory / f"utilization-{kernel}.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _versus_size(plt, kernel, params, rows, column, label, path):
    lines = defaultdict(dict)
    for row in rows:
        if row[column] is not None:
            lines[_machine_label(row)].setdefault(_size(row, params), []).append(row[column])
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for machine, points in sorted(lines.items()):
        sizes = sorted(points)
        axes.plot(sizes, [sum(points[s]) / len(points[s]) for s in sizes], marker="o",
                  label=machine)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(" x ".join(p.upper() for p in params))
    axes.set_ylabel(label)
    axes.set_title(f"{kernel}: {label} against problem size")
    return _save(plt, figure, axes, path)


def _save(plt, figure, axes, path):
    """Write ``figure`` (its legend, a tight layout) to ``path``; returns ``path``."""
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


#: The marker of each binding resource on the roofline plot.
MARKERS = {"compute": "o", "HBM": "s"}


def _roofline(plt, kernel, params, rows, path):
    """The achieved share of the roofline against problem size, a line per machine."""
    lines = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["roofline_share"] is not None:
            lines[_machine_label(row)][_size(row, params)].append(row)
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for machine, points in sorted(lines.items()):
        sizes = sorted(points)
        shares = [sum(r["roofline_share"] for r in points[s]) / len(points[s])
                  for s in sizes]
        (line,) = axes.plot(sizes, shares, label=machine)
        for size, share in zip(sizes, shares, strict=True):
            axes.plot(size, share, MARKERS.get(points[size][0]["binding"], "x"),
                      color=line.get_color())
    axes.set_xscale("log")
    axes.set_ylim(0, 1.05)
    axes.set_xlabel(" x ".join(p.upper() for p in params))
    axes.set_ylabel("share of the roofline (bound / cycles)")
    axes.set_title(f"{kernel}: share of the roofline (circles compute-, squares HBM-bound)")
    return _save(plt, figure, axes, path)
