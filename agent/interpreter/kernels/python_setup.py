# Runs in every Python kernel before its first cell (python_bridge.py).
#
# Plain tracebacks: agents read them, and colour codes are noise there.
# And a display formatter that describes matplotlib figures as data, as
# E2B's code interpreter does in a result's `chart`: the type of the chart,
# its title, labels and elements. matplotlib is imported only by the cells
# that use it; the formatter waits for it by name.


def _tupper_setup():
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()  # noqa: F821 (the kernel's)
    ip.run_line_magic("colors", "nocolor")

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("application/vnd.tupper.chart+json")
        print_method = ObjectName("_repr_tupper_chart_")
        _return_type = dict

        def pop(self, typ, default=None):
            # matplotlib's inline backend, set up by the cell that imports
            # pyplot, takes Figure away from every formatter: not this one.
            return default

    def text(t):
        return t.get_text() if t is not None and t.get_text() else None

    def number(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return str(v)

    def axes_base(ax, kind):
        return {
            "type": kind,
            "title": ax.get_title() or None,
            "x_label": ax.get_xlabel() or None,
            "y_label": ax.get_ylabel() or None,
            "x_scale": ax.get_xscale(),
            "y_scale": ax.get_yscale(),
            "x_ticks": [number(v) for v in ax.get_xticks()],
            "x_tick_labels": [t.get_text() for t in ax.get_xticklabels()],
            "y_ticks": [number(v) for v in ax.get_yticks()],
            "y_tick_labels": [t.get_text() for t in ax.get_yticklabels()],
        }

    def chart_of_axes(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge

        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            labels = [t.get_text() for t in ax.texts]
            return {
                "type": "pie",
                "title": ax.get_title() or None,
                "elements": [
                    {"label": labels[i] if i < len(labels) else None,
                     "angle": abs(w.theta2 - w.theta1), "radius": w.r}
                    for i, w in enumerate(wedges)
                ],
            }
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            chart = axes_base(ax, "bar")
            ticks = {round(float(v), 6): t.get_text() for v, t in zip(ax.get_xticks(), ax.get_xticklabels())}
            chart["elements"] = []
            for c in bars:
                for rect in c.patches:
                    x = rect.get_x() + rect.get_width() / 2
                    chart["elements"].append({
                        "label": ticks.get(round(x, 6), str(x)),
                        "group": c.get_label() if not c.get_label().startswith("_") else None,
                        "value": rect.get_height(),
                    })
            return chart
        scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
        if scatters:
            chart = axes_base(ax, "scatter")
            chart["elements"] = [
                {"label": c.get_label() if not c.get_label().startswith("_") else None,
                 "points": [[number(x), number(y)] for x, y in c.get_offsets()]}
                for c in scatters
            ]
            return chart
        lines = ax.get_lines()
        if lines:
            chart = axes_base(ax, "line")
            chart["elements"] = [
                {"label": l.get_label() if not l.get_label().startswith("_") else None,
                 "points": [[number(x), number(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]}
                for l in lines
            ]
            return chart
        return {"type": "unknown", "title": ax.get_title() or None, "elements": []}

    def chart_of_figure(fig):
        try:
            return describe_figure(fig)
        except Exception:  # a figure we cannot read still shows as an image
            return None

    def describe_figure(fig):
        axes = [ax for ax in fig.get_axes() if ax.get_visible()]
        if not axes:
            return None
        if len(axes) == 1:
            return chart_of_axes(axes[0])
        return {
            "type": "superchart",
            "title": text(getattr(fig, "_suptitle", None)),
            "elements": [chart_of_axes(ax) for ax in axes],
        }

    formatter = ChartFormatter(parent=ip.display_formatter)
    ip.display_formatter.formatters[formatter.format_type] = formatter
    if formatter.format_type not in ip.display_formatter.active_types:
        ip.display_formatter.active_types = ip.display_formatter.active_types + [formatter.format_type]
    formatter.for_type_by_name("matplotlib.figure", "Figure", chart_of_figure)


_tupper_setup()
del _tupper_setup
