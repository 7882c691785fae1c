// Chart data for the Python driver: `_chart_of(fig)` describes a matplotlib figure in the format
// E2B's code interpreter SDK parses into its Chart classes (line, scatter, bar, pie,
// box_and_whisker, superchart, unknown). Best effort: it returns None rather than raise, and an
// axes it cannot read is "unknown". The text goes on a command line, so its notes are here:
//  - _chart_axis(ax, "x"|"y") -> (scale, [(tick, tick label)], value -> JSON value): dates become
//    ISO 8601 strings (pandas' period axes count ax.freq periods since 1970), string categories
//    their names; non-finite numbers None (points dropped).
//  - _chart_namer names a bar or box by its position: the label of the nearest tick on a category
//    axis or one with fixed ticks (grouped bars sit beside their tick), else the position itself.
//  - _chart_boxes: a box is a closed line (a PathPatch with patch_artist=True) holding a median
//    segment across it; whiskers and caps are the segments within its width, fliers the points
//    of marker-only lines beyond them. Tried upright first, then lying (vert=False).
//  - Classification, in order: pie (Wedges), boxes, bars (BarContainers), lines and scatters
//    (a "scatter" when no line has a line style, as plot(x, y, "o") draws).
#include "service/context_drivers.h"

namespace sandstream {

extern const std::string_view kPythonCharts;

const std::string_view kPythonCharts = R"CHARTS(
def _chart_f(v):
    try:
        v = float(v)
    except Exception:
        return None
    return v if abs(v) < float("inf") else None


def _chart_text(s):
    import re
    s = str(s or "").replace("\u2212", "-")
    return re.sub(r"^\$\\mathdefault\{(.*)\}\$$", r"\1", s)


def _chart_label(artist):
    label = str(artist.get_label() or "")
    return "" if label.startswith("_") else label


def _chart_title(ax):
    return _chart_text(ax.get_title() or ax.get_title("left") or ax.get_title("right")) or None


def _chart_xy(a):
    import numpy as np
    return np.ma.filled(np.ma.asarray(a, dtype=float), np.nan).reshape(-1, 2)


def _chart_lines(ax):
    return [l for l in ax.get_lines() if l.get_visible() and l.get_transform() == ax.transData]


def _chart_axis(ax, which):
    import matplotlib.dates as md
    axis = getattr(ax, which + "axis")
    conv = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    mod = type(conv).__module__
    scale = axis.get_scale()
    if isinstance(axis.get_major_locator(), md.DateLocator) or isinstance(conv, md.DateConverter) \
            or mod == "matplotlib.dates":
        scale = "datetime"
    elif mod == "matplotlib.category":
        scale = "categorical"
    locs = list(axis.get_majorticklocs())
    labels = axis.get_major_formatter().format_ticks(locs)
    lo, hi = sorted(axis.get_view_interval())
    eps = (hi - lo) * 1e-6
    ticks = [(float(t), _chart_text(s)) for t, s in zip(locs, labels) if lo - eps <= t <= hi + eps]
    names = {round(t): s for t, s in ticks}

    def value(v):
        v = _chart_f(v)
        if v is None or scale not in ("datetime", "categorical"):
            return v
        if scale == "categorical":
            return names.get(round(v), v)
        if type(conv).__name__ == "PeriodConverter":
            import pandas as pd
            return pd.Period(ordinal=round(v), freq=ax.freq).to_timestamp().isoformat()
        return md.num2date(v).isoformat()
    return scale, ticks, value


def _chart_namer(ax, which):
    scale, ticks, value = _chart_axis(ax, which)
    axis = getattr(ax, which + "axis")
    near = scale == "categorical" or "Fixed" in type(axis.get_major_locator()).__name__ + \
        type(axis.get_major_formatter()).__name__
    locs = sorted(t for t, _ in ticks)
    gap = min([b - a for a, b in zip(locs, locs[1:])] or [float("inf")]) / 2

    def name(pos):
        t, s = min(ticks or [(float("inf"), "")], key=lambda ts: abs(ts[0] - pos))
        if near and abs(t - pos) < gap:
            return s
        v = value(pos)
        return v if isinstance(v, str) else "%.12g" % v
    return name


def _chart_2d(ax, kind, elements):
    import re
    chart = {"type": kind, "title": _chart_title(ax), "elements": elements}
    for k in "xy":
        label = _chart_text(getattr(ax, "get_%slabel" % k)()) or None
        m = re.search(r"(?:\(([^()]*)\)|\[([^\[\]]*)\])\s*$", label or "")
        chart[k + "_label"] = label
        chart[k + "_unit"] = ((m.group(1) or m.group(2) or "").strip() or None) if m else None
    return chart


def _chart_points(ax, kind, series):
    chart, conv = _chart_2d(ax, kind, []), {}
    for k in "xy":
        scale, ticks, conv[k] = _chart_axis(ax, k)
        chart[k + "_ticks"] = [conv[k](t) for t, _ in ticks]
        chart[k + "_tick_labels"] = [s for _, s in ticks]
        chart[k + "_scale"] = scale
    for label, xy in series:
        points = [[conv["x"](x), conv["y"](y)] for x, y in _chart_xy(xy)]
        points = [p for p in points if None not in p]
        if points:
            chart["elements"].append({"label": label, "points": points})
    return chart


def _chart_bars(ax, bars):
    flip = getattr(bars[0], "orientation", None) == "horizontal"
    name, elements = _chart_namer(ax, "y" if flip else "x"), []
    for c in bars:
        for r in c.patches:
            x, y, w, h = r.get_x(), r.get_y(), r.get_width(), r.get_height()
            pos, v = (y + h / 2, w) if flip else (x + w / 2, h)
            elements.append({"label": name(pos), "group": _chart_label(c), "value": _chart_f(v)})
    return _chart_2d(ax, "bar", elements)


def _chart_boxes(ax):
    segs, marks, rects, found = [], [], [], []
    for l in _chart_lines(ax):
        xy = _chart_xy(l.get_xydata())
        if l.get_linestyle() == "None":
            marks.append(xy)
        elif len(xy) == 2:
            segs.append(xy)
        elif len(xy) >= 5 and (xy[0] == xy[-1]).all():
            rects.append((*xy.min(0), *xy.max(0)))
    for p in ax.patches:
        if type(p).__name__ == "PathPatch":
            b = p.get_path().get_extents()
            rects.append((b.x0, b.y0, b.x1, b.y1))
    for x0, y0, x1, y1 in rects:
        for flip in (False, True):
            a, b, lo, hi = (y0, y1, x0, x1) if flip else (x0, x1, y0, y1)
            e = 1e-9 * (1 + abs(a) + abs(b) + abs(lo) + abs(hi))
            inside = [s[:, ::-1] if flip else s for s in segs]
            inside = [s for s in inside if a - e <= s[:, 0].min() and s[:, 0].max() <= b + e]
            meds = [s for s in inside if abs(s[0, 1] - s[1, 1]) <= e and lo - e <= s[0, 1] <= hi + e
                    and s[0, 0] != s[1, 0]]
            if not meds:
                continue
            med = max(meds, key=lambda s: abs(s[1, 0] - s[0, 0]))[0, 1]
            ys = [lo, hi] + [y for s in inside for y in s[:, 1]]
            low, high = min(ys), max(ys)
            out = [y for m in marks for x, y in (m[:, ::-1] if flip else m)
                   if a - e <= x <= b + e and (y < low or y > high)]
            stats = dict(zip(("min", "first_quartile", "median", "third_quartile", "max"),
                             map(_chart_f, (low, lo, med, hi, high))))
            found.append((flip, (a + b) / 2, dict(stats, outliers=sorted(map(_chart_f, out)))))
            break
    if not found:
        return None
    name = _chart_namer(ax, "y" if found[0][0] else "x")
    found.sort(key=lambda f: f[1])
    elements = [dict(label=name(pos), **stats) for _, pos, stats in found]
    return _chart_2d(ax, "box_and_whisker", elements)


def _chart_axes(ax):
    try:
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            return {"type": "pie", "title": _chart_title(ax), "elements": [
                {"label": _chart_label(w), "angle": _chart_f(abs(w.theta2 - w.theta1)),
                 "radius": _chart_f(w.r)} for w in wedges]}
        boxes = _chart_boxes(ax)
        if boxes:
            return boxes
        bars = [c for c in ax.containers if isinstance(c, BarContainer) and c.patches]
        if bars:
            return _chart_bars(ax, bars)
        lines = [l for l in _chart_lines(ax) if len(l.get_xydata())]
        dots = [c for c in ax.collections if isinstance(c, PathCollection) and len(c.get_offsets())]
        if lines or dots:
            kind = "line" if any(l.get_linestyle() != "None" for l in lines) else "scatter"
            return _chart_points(ax, kind, [(_chart_label(l), l.get_xydata()) for l in lines] +
                                 [(_chart_label(c), c.get_offsets()) for c in dots])
    except Exception:
        pass
    return {"type": "unknown", "title": _chart_title(ax), "elements": []}


def _chart_of(fig):
    try:
        axes = [a for a in fig.axes if a.get_label() != "<colorbar>" and
                not hasattr(a, "_colorbar")]
        sup = getattr(fig, "_suptitle", None)
        sup = (_chart_text(sup.get_text()) or None) if sup is not None else None
        if len(axes) == 1:
            chart = _chart_axes(axes[0])
            chart["title"] = chart["title"] or sup
            return chart
        if axes:
            return {"type": "superchart", "title": sup, "elements": [_chart_axes(a) for a in axes]}
    except Exception:
        pass
    return None
)CHARTS";

}  // namespace sandstream
