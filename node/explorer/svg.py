"""Charts drawn as inline SVG strings (no library, nothing fetched at runtime): a line chart with
integer-friendly ticks, a round's phase timeline, and a duty window strip. Every text goes
through ``html.escape``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f")
PHASE_COLORS = {"commit": "#60a5fa", "reveal": "#f59e0b", "verdict": "#a78bfa", "attest": "#34d399"}


def nice_ticks(lo: float, hi: float, n: int = 5, integer: bool = False) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (steps of 1, 2 or 5 x 10^k; whole numbers
    when ``integer``)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(n, 1)
    mag = 1.0
    while mag * 10 <= raw:
        mag *= 10
    while mag > raw:
        mag /= 10
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1, round(step))
    first = (lo // step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 10))
        t += step
    return ticks


@dataclass(frozen=True)
class _Frame:
    """A chart's plot area (left, top, width, height in px) and the data ranges it maps."""

    ml: int
    mt: int
    pw: int
    ph: int
    x0: float
    x1: float
    y0: float
    y1: float

    def sx(self, x: float) -> float:
        return self.ml + (x - self.x0) / (self.x1 - self.x0) * self.pw

    def sy(self, y: float) -> float:
        return self.mt + self.ph - (y - self.y0) / (self.y1 - self.y0) * self.ph


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_fmt: Callable[[float], str] = lambda v: f"{v:g}",
    width: int = 560,
    height: int = 240,
    step: bool = False,
    x_integer: bool = True,
    y_from_zero: bool = True,
) -> str:
    """Polylines (``step``: hold each value until the next x) with axes, ticks and a legend; the
    y axis starts at 0 unless ``y_from_zero`` is false (then it fits the data, so small moves
    show)."""
    pts = [p for _, s in series for p in s]
    ml, mr, mt, mb = 64, 16, 40, 40
    pw, ph = width - ml - mr, height - mt - mb
    out = [
        (
            f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
            f'{height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        ),
        f'<text x="{ml}" y="16" class="ctitle">{escape(title)}</text>',
    ]
    if not pts:
        out.append(
            f'<text x="{ml + pw / 2}" y="{mt + ph / 2}" text-anchor="middle" class="muted">no '
            "data yet</text></svg>"
        )
        return "".join(out)
    frame, yt, xt = _fit(pts, ml, mt, pw, ph, x_integer, y_from_zero)
    out += _ticks(frame, yt, xt, y_fmt)
    out.append(_axes(frame, height, x_label, y_label))
    lx = ml
    for i, (name, s) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        out += _line(frame, color, sorted(s), step)
        label = escape(name)
        out.append(
            f'<rect x="{lx}" y="24" width="10" height="10" fill="{color}"/>'
            f'<text x="{lx + 14}" y="33" class="legend">{label}</text>'
        )
        lx += 22 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


def _fit(
    pts: list[tuple[float, float]],
    ml: int,
    mt: int,
    pw: int,
    ph: int,
    x_integer: bool,
    y_from_zero: bool,
) -> tuple[_Frame, list[float], list[float]]:
    """The frame that shows every point, and its y and x ticks (the y range widened to them)."""
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y_from_zero:
        y0 = min(0.0, y0)
    else:
        pad = (y1 - y0) * 0.1 or max(abs(y1) * 0.05, 1)
        y0, y1 = y0 - pad, y1 + pad
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    yt = nice_ticks(y0, y1 if y1 > y0 else y0 + 1)
    y0, y1 = min(y0, yt[0]), max(y1, yt[-1])
    xt = nice_ticks(x0, x1, 6, integer=x_integer)
    return _Frame(ml, mt, pw, ph, x0, x1, y0, y1), yt, xt


def _ticks(f: _Frame, yt: list[float], xt: list[float], y_fmt: Callable[[float], str]) -> list[str]:
    """Grid lines with their y labels, and the x labels inside the range."""
    ml, pw = f.ml, f.pw
    out = [
        f'<line x1="{ml}" x2="{ml + pw}" y1="{f.sy(t):.1f}" y2="{f.sy(t):.1f}" '
        f'class="grid"/><text x="{ml - 6}" y="{f.sy(t) + 4:.1f}" text-anchor="end" '
        f'class="tick">{escape(y_fmt(t))}</text>'
        for t in yt
    ]
    out += [
        f'<text x="{f.sx(t):.1f}" y="{f.mt + f.ph + 16}" text-anchor="middle" '
        f'class="tick">{t:g}</text>'
        for t in xt
        if f.x0 <= t <= f.x1
    ]
    return out


def _axes(f: _Frame, height: int, x_label: str, y_label: str) -> str:
    ml, mt, pw, ph = f.ml, f.mt, f.pw, f.ph
    return (
        f'<line x1="{ml}" x2="{ml + pw}" y1="{mt + ph}" y2="{mt + ph}" class="axis"/><line '
        f'x1="{ml}" x2="{ml}" y1="{mt}" y2="{mt + ph}" class="axis"/><text x="{ml + pw / 2}" '
        f'y="{height - 4}" text-anchor="middle" class="label">{escape(x_label)}</text><text '
        f'x="12" y="{mt + ph / 2}" text-anchor="middle" class="label" transform="rotate(-90 12 '
        f'{mt + ph / 2})">{escape(y_label)}</text>'
    )


def _line(f: _Frame, color: str, s: list[tuple[float, float]], step: bool) -> list[str]:
    """One series (sorted by x): its polyline, and a dot per point when there are few."""
    coords: list[tuple[float, float]] = []
    for j, (x, y) in enumerate(s):
        if step and j:
            coords.append((f.sx(x), f.sy(s[j - 1][1])))
        coords.append((f.sx(x), f.sy(y)))
    if step and s and s[-1][0] < f.x1:
        coords.append((f.sx(f.x1), f.sy(s[-1][1])))
    poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in coords)
    out = [f'<polyline points="{poly}" fill="none" stroke="{color}" stroke-width="2"/>']
    out += [
        f'<circle cx="{f.sx(x):.1f}" cy="{f.sy(y):.1f}" r="2.5" fill="{color}"/>'
        for x, y in s
        if len(s) <= 40
    ]
    return out


WINDOW_NAMES = {
    "commit_deadline": "commit",
    "reveal_end": "reveal",
    "verdict_end": "verdict",
    "vote_reveal_end": "vote reveal",
    "appeal_end": "appeal",
    "appeal_reveal_end": "appeal reveal",
    "final_end": "final",
    "final_reveal_end": "final reveal",
    "attest_end": "attest",
}


def phase_segments(windows: dict[str, int]) -> list[tuple[str, int, int]]:
    """(phase, first height, last height) from a round's windows (any set of *_end heights, in
    height order, starting at open_height)."""
    start = windows.get("open_height", 0)
    ends = sorted((v, k) for k, v in windows.items() if k != "open_height" and v)
    segs = []
    for v, k in ends:
        name = WINDOW_NAMES.get(
            k, k.removesuffix("_end").removesuffix("_deadline").replace("_", " ")
        )
        segs.append((name, start, v))
        start = v
    return segs


def timeline(windows: dict[str, int], now: int, finalized: int = 0, width: int = 560) -> str:
    """A round's phases as a bar of coloured segments, labelled with their end heights, and a
    marker at the current height."""
    segs = phase_segments(windows)
    if not segs:
        return ""
    lo, hi = segs[0][1], segs[-1][2]
    span = max(hi - lo, 1)
    ml, pw = 8, width - 16

    def sx(h: float) -> float:
        return ml + (min(max(h, lo), hi) - lo) / span * pw

    out = [
        (
            f'<svg class="timeline" viewBox="0 0 {width} 44" width="{width}" height="44" '
            'role="img" aria-label="phase timeline" xmlns="http://www.w3.org/2000/svg">'
        )
    ]
    for name, a, b in segs:
        color = PHASE_COLORS.get(name.split()[-1], "#94a3b8")
        done = now >= b
        out.append(
            f'<rect x="{sx(a):.1f}" y="6" width="{max(sx(b) - sx(a), 1):.1f}" height="16" '
            f'fill="{color}" opacity="{1.0 if not done else 0.55}"><title>{escape(name)}: heights '
            f'{a + 1}..{b}</title></rect><text x="{(sx(a) + sx(b)) / 2:.1f}" y="18" '
            f'text-anchor="middle" class="seg">{escape(name)}</text><text x="{sx(b):.1f}" y="36" '
            f'text-anchor="middle" class="tick">{b}</text>'
        )
    out.append(f'<text x="{sx(lo):.1f}" y="36" text-anchor="start" class="tick">{lo}</text>')
    if lo <= now <= hi and not finalized:
        out.append(f'<line x1="{sx(now):.1f}" x2="{sx(now):.1f}" y1="2" y2="26" class="now"/>')
    out.append("</svg>")
    return "".join(out)


def duty_strip(bits: str, size: int = 64) -> str:
    """The SLA window as squares, oldest first: green kept, red missed, grey not yet used."""
    cells = []
    pad = size - len(bits)
    for i in range(size):
        b = bits[i - pad] if i >= pad else ""
        cls = {"1": "kept", "0": "missed"}.get(b, "empty")
        cells.append(
            f'<rect x="{(i % 32) * 15}" y="{(i // 32) * 15}" width="12" height="12" rx="2" '
            f'class="{cls}"><title>'
            f"{'kept' if b == '1' else 'missed' if b == '0' else 'no duty yet'}</title></rect>"
        )
    rows = (size + 31) // 32
    return (
        f'<svg class="duties" viewBox="0 0 480 {rows * 15}" width="480" height="{rows * 15}" '
        f'role="img" aria-label="last {len(bits)} duties" xmlns="http://www.w3.org/2000/svg">'
        + "".join(cells)
        + "</svg>"
    )
