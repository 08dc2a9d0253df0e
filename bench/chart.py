"""The overhead chart of docs/PERFORMANCE.md: each configuration's slowdown
per program and the median over the programs, wall time, log scale."""
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def draw(data, path):
    configs = [c for c in data["meta"]["configs"] if c != "none"]
    names = list(data["results"])
    slow = {c: [] for c in configs}
    for name in names:
        r = data["results"][name]
        for c in configs:
            slow[c].append(r[c]["median"] / r["none"]["median"] if "median" in r[c] else float("nan"))
    labels = names + ["median"]
    for c in configs:
        seen = [v for v in slow[c] if v == v]
        slow[c].append(statistics.median(seen) if seen else float("nan"))

    fig, ax = plt.subplots(figsize=(12, 5.5), dpi=110)
    width = 0.8 / len(configs)
    colours = plt.get_cmap("tab10")
    for i, c in enumerate(configs):
        xs = [x + (i - (len(configs) - 1) / 2) * width for x in range(len(labels))]
        ax.bar(xs, slow[c], width, label=c, color=colours(i),
               edgecolor="black" if c.startswith("calipers") else "none", linewidth=0.6)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_yticks([1, 1.5, 2, 3, 5, 10])
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
