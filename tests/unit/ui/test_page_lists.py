"""The token chips' HTML splits into a head and one part per chip at the marker the page's list slot is given
(`inspector.viz.tokens.CHIP_START`), so an update can redraw only the chips whose HTML changed (the browser side:
tests/browser/test_page_lists_e2e.py)."""

from __future__ import annotations

from inspector.viz.tokens import CHIP_START, token_chips_html


def test_chip_html_splits_into_a_head_and_one_part_per_chip():
    pieces = ["Hi", '<span class="ii-chip ii-gen">', "&", "x"]  # a piece that looks like the marker is escaped
    html = token_chips_html([1, 2, 3, 4], pieces, [True, False, False, False], 2, selected=1, decided={3: (5, True)})
    parts = html[:html.rindex("</")].split(CHIP_START)
    assert len(parts) == 1 + 4
    assert parts[0].startswith('<div id="token-chips"') and 'id="token-count"' in parts[0]
    assert all('data-pos="%d"' % i in part for i, part in enumerate(parts[1:]))
    assert html.endswith("</div>") and html.count("</div>") == 2  # the head's and the container's
