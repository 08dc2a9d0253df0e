"""The overhead chart of docs/PERFORMANCE.md: each configuration's slowdown
per program and the median over the programs, wall time, log scale."""
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def draw(data, path, limit):
    """Timed-out runs (slower than `limit` times the unprofiled run) are
    drawn hatched at the limit and count as slower than it in the median."""
    configs = [c for c in data["meta"]["configs"] if c != "none"]
    names = list(data["results"])
    slow = {c: [] for c in configs}
    for name in names:
        r = data["results"][name]
        for c in configs:
            if "median" in r[c]:
                slow[c].append(r[c]["median"] / r["none"]["median"])
            elif any(e.startswith("timed out") for e in r[c].get("errors", [])):
                slow[c].append(float("inf"))
            else:
                slow[c].append(float("nan"))
    labels = names + ["median"]
    for c in configs:
        seen = [v for v in slow[c] if v == v]
        slow[c].append(statistics.median(seen) if seen else float("nan"))

    fig, ax = plt.subplots(figsize=(12, 5.5), dpi=110)
    width = 0.8 / len(configs)
    colours = plt.get_cmap("tab10")
    for i, c in enumerate(configs):
        xs = [x + (i - (len(configs) - 1) / 2) * width for x in range(len(labels))]
        over = [v == float("inf") for v in slow[c]]
        ax.bar(xs, [limit if o else v for v, o in zip(slow[c], over)], width, label=c,
               color=colours(i), edgecolor="black" if c.startswith("calipers") else "none",
               linewidth=0.6, hatch=["//" if o else "" for o in over])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_yticks([t for t in (1, 1.5, 2, 3, 5, 10, 15, 20, 50) if t <= limit])
    ax.get_yaxis().set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g×"))
    ax.set_ylabel("slowdown over no profiler (wall time, median)")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.axvspan(len(labels) - 1.5, len(labels) - 0.5, color="#eeeeee", zorder=0)
    ax.legend(ncol=4, fontsize="small", loc="upper left")
    ax.set_title("Profiler overhead (%s, %s)" % (data["meta"]["date"], data["meta"]["machine"]),
                 fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def draw_accuracy(data, path, units):
    """One small panel per accuracy test: each profiler's error (lower is
    better); for leaks, the leak missed (1) plus the lines wrongly reported."""
    tests = list(data["results"])
    profilers = []
    for r in data["results"].values():
        profilers += [p for p in r if p not in profilers]
    colours = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(tests), figsize=(2.1 * len(tests), 3.6), dpi=110,
                             squeeze=False)  # one test: still a row of panels
    for ax, test in zip(axes[0], tests):
        names, values, missed = [], [], []
        for p in profilers:
            r = data["results"][test].get(p)
            if r is None:
                continue
            s = r["score"]
            names.append(p)
            if test == "leaks" and isinstance(s, list):
                values.append((1 - s[0]) + s[1])
                missed.append(False)
            elif isinstance(s, (int, float)):
                values.append(s)
                missed.append(False)
            else:  # missed or failed: drawn as an empty, hatched bar
                values.append(0)
                missed.append(True)
        top = max(values + [1e-9])
        for i, (name, v, m) in enumerate(zip(names, values, missed)):
            ax.bar(i, top if m else v, color="none" if m else colours(profilers.index(name)),
                   hatch="//" if m else None, edgecolor="grey" if m else
                   ("black" if name == "calipers" else "none"), linewidth=0.6)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=60, ha="right", fontsize="small")
        ax.set_title(test, fontsize="medium")
        ax.set_ylabel("missed + wrong lines" if test == "leaks" else
                      "error (%s)" % units.get(test, ""), fontsize="small")
        ax.tick_params(axis="y", labelsize="small")
    fig.suptitle("Accuracy: error against the program's own truth, lower is better "
                 "(hatched: not seen)", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
