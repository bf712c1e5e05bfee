"""The one way the benchmark reports finish a plot: log-2 message sizes, labels, grid,
legend, saved as a PNG and closed (both reports draw the same kind of figure)."""
import os


def save(fig, ax, path, xlabel, ylabel, title, sizes=True, logy=False, legend_size=8):
    """`sizes`: the x axis is message bytes (log 2); `logy`: log y axis."""
    import matplotlib.pyplot as plt

    if sizes:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both" if sizes or logy else "major", alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.path.basename(path)
