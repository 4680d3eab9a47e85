"""Server-side SVG bar charts for the portal's Usage page: no JavaScript, no build step.

One chart per dimension: a bar per day of the current period, and the previous period's same
day drawn as a thin grey marker beside it, so this month reads against last month at a glance.
Every label is escaped; the numbers are ours.
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 30


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above `value` (axis top)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def short(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            text = f"{value / limit:.1f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def bar_chart(
    title: str,
    current: list[float],
    previous: list[float] | None = None,
    *,
    labels: list[str] | None = None,
    unit: str = "",
    chart_id: str = "",
) -> str:
    """An SVG bar chart of `current` (one bar per point) with `previous` beside each bar."""
    previous = previous or []
    count = max(len(current), len(previous), 1)
    top = nice_ceiling(max([*current, *previous, 0]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / count
    bar = max(1.0, slot * 0.62)

    def y(value: float) -> float:
        return TOP + plot_h - plot_h * (value / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" class="chart" '
        f'id="{escape(chart_id)}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="600" fill="#1d2433">'
        f"{escape(title)}{' (' + escape(unit) + ')' if unit else ''}</text>",
    ]
    for i in range(5):  # grid lines and y labels
        value = top * i / 4
        gy = y(value)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}" '
            f'stroke="#e5e7eb" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{gy + 4:.1f}" font-size="10" text-anchor="end" '
            f'fill="#6b7280">{escape(short(value))}</text>'
        )
    for i, value in enumerate(previous):
        x = LEFT + slot * i + (slot - bar) / 2
        parts.append(
            f'<rect class="previous" x="{x + bar * 0.55:.1f}" y="{y(value):.1f}" '
            f'width="{bar * 0.45:.1f}" height="{TOP + plot_h - y(value):.1f}" fill="#c7cdd9">'
            f"<title>previous period, day {i + 1}: {escape(short(value))}</title></rect>"
        )
    for i, value in enumerate(current):
        x = LEFT + slot * i + (slot - bar) / 2
        label = labels[i] if labels and i < len(labels) else str(i + 1)
        parts.append(
            f'<rect class="current" x="{x:.1f}" y="{y(value):.1f}" width="{bar * 0.55:.1f}" '
            f'height="{TOP + plot_h - y(value):.1f}" fill="#2457d6">'
            f"<title>{escape(label)}: {escape(short(value))}</title></rect>"
        )
    for i in range(count):  # x labels: day 1 and every fifth day
        if i == 0 or (i + 1) % 5 == 0:
            label = labels[i] if labels and i < len(labels) else str(i + 1)
            parts.append(
                f'<text x="{LEFT + slot * (i + 0.5):.1f}" y="{HEIGHT - 12}" font-size="10" '
                f'text-anchor="middle" fill="#6b7280">{escape(label)}</text>'
            )
    parts.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" '
        f'stroke="#9aa3b5"/>'
    )
    legend_x = WIDTH - RIGHT - 210
    parts.append(
        f'<rect x="{legend_x}" y="7" width="10" height="10" fill="#2457d6"/>'
        f'<text x="{legend_x + 14}" y="16" font-size="10" fill="#1d2433">this period</text>'
        f'<rect x="{legend_x + 90}" y="7" width="10" height="10" fill="#c7cdd9"/>'
        f'<text x="{legend_x + 104}" y="16" font-size="10" fill="#1d2433">previous period</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
