"""The HTML head map and kind counts the app draws first: the same numbers, colours and words as their Plotly
twins, checked on hand-built heads."""

from __future__ import annotations

import numpy as np
import pytest
from plotly.colors import get_colorscale, sample_colorscale
from sinkscope import plot
from sinkscope.core.i18n import Text
from sinkscope.core.names import HEAD_METRICS
from sinkscope.plot.html_figures import tick_step

from tests.helpers import read


def hand_built_heads() -> dict[str, np.ndarray]:
    """3 layers x 2 heads with a value past the scale's end and a missing one."""
    heads = {metric: np.full((3, 2), 0.25) for metric in HEAD_METRICS}
    heads["sink"] = np.array([[0.0, 1.0], [0.5, 1.3], [np.nan, 0.125]])
    heads["kind"] = np.array([["mixed", "sink"], ["diagonal", "sink"], ["previous_token", "sink"]])
    return heads


def test_every_cell_carries_its_value_and_its_colour_on_plotlys_own_scale() -> None:
    heads = hand_built_heads()
    figure = read(plot.head_map_html(heads, "sink"))
    np.testing.assert_array_equal(figure.values(), heads["sink"])
    reds = get_colorscale("Reds")
    assert figure.fill(0, 0) == sample_colorscale(reds, [0.0])[0]
    assert figure.fill(2, 1) == sample_colorscale(reds, [0.125])[0] == "rgb(254, 224, 210)"  # a stop of Reds
    assert figure.fill(1, 1) == figure.fill(0, 1) == sample_colorscale(reds, [1.0])[0]  # 1.3 shows as the top
    assert figure.fill(2, 0) == "transparent"
    viridis = get_colorscale("Viridis")
    assert read(plot.head_map_html(heads, "diagonal")).fill(0, 0) == sample_colorscale(viridis, [0.25])[0]


def test_the_html_map_shows_what_the_plotly_map_shows() -> None:
    heads = hand_built_heads()
    figure, twin = read(plot.head_map_html(heads, "sink")), plot.fig_head_map(heads, "sink")
    np.testing.assert_array_equal(figure.values(), np.asarray(twin.data[0].z))
    assert figure.title == twin.layout.title.text.replace("<br>", " ") == "sink score: attention to the first token"
    titles = (twin.layout.xaxis.title.text, twin.layout.yaxis.title.text)
    assert (figure.texts["ss-x-title"], figure.texts["ss-y-title"]) == titles == ("head", "layer")
    assert figure.texts["ss-y-ticks"] == "0 1 2" and figure.texts["ss-x-ticks"] == "0 1"


def test_hover_gives_every_metric_and_the_kind_in_the_viewers_language() -> None:
    figure = read(plot.head_map_html(hand_built_heads(), "sink", lang="pt"))
    tip = figure.cells[2]["title"].splitlines()  # layer 1, head 0
    shown = [f"{Text('pt').metric(m)}: 0,250" for m in HEAD_METRICS[1:]]  # each metric by its Portuguese name
    assert tip == ["camada 1, cabeça 0", "escore de sorvedouro: 0,500", *shown, "tipo: diagonal"]
    assert figure.texts["ss-x-title"] == "cabeça"


def test_the_kind_bars_count_each_layers_heads() -> None:
    kinds = np.array([["sink", "sink", "mixed", "diagonal"], ["previous_token"] * 4])
    figure = read(plot.kind_counts_html(kinds))
    assert figure.title == plot.fig_kind_counts(kinds).layout.title.text
    tip = figure.bars[0]["title"].splitlines()
    assert tip == ["layer 0", "sink: 2", "diagonal: 1", "previous_token: 0", "mixed: 1"]
    colour = plot.KIND_COLORS
    bottom_up = [f"height:50%;background:{colour['sink']}", f"height:25%;background:{colour['diagonal']}"]
    assert figure.segments[0] == [*bottom_up, f"height:25%;background:{colour['mixed']}"]  # no empty part
    assert figure.segments[1] == [f"height:100%;background:{colour['previous_token']}"]
    assert figure.texts["ss-y-ticks"] == "0 1 2 3 4"
    assert figure.texts["ss-legend"] == "sink diagonal previous_token mixed"


@pytest.mark.parametrize(("most", "ticks", "step"), [(4, 5, 1), (9, 5, 2), (16, 5, 5), (29, 6, 5), (32, 5, 10)])
def test_ticks_come_every_1_2_or_5_times_a_power_of_ten(most: int, ticks: int, step: int) -> None:
    assert tick_step(most, ticks) == step


def test_a_grid_of_maps_is_drawn_wide_enough_for_a_projector() -> None:
    """Plotly keeps an image's aspect: the height decides the width. Every head of 30 layers x 9 heads, and the
    lab's one-head model, are both drawn about 640 px across (they were 230 px and a thin strip)."""
    for layers, heads in ((30, 9), (1, 1), (2, 4)):
        fig = plot.fig_thumbnails(np.ones((layers, heads, 64, 64)), "layer", "every head")
        image_height = fig.layout.height - 90  # the title's and the axes' room
        drawn_width = image_height * (heads * 66 - 2) / (layers * 66 - 2)
        assert drawn_width >= 600 or fig.layout.height == 2400, (layers, heads, drawn_width)
        assert fig.layout.height <= 2400


def test_the_lit_text_shades_each_key_by_its_weight_over_the_rows_largest() -> None:
    """Query 2 of a hand-built row: the sink takes 0.6, token 1 0.1, token 2 0.3; token 3 comes after the query."""
    from html.parser import HTMLParser

    class Spans(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.spans: list[dict[str, str]] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "span":
                self.spans.append({name: value or "" for name, value in attrs})

    tokens = ["The", "␣cat", "␣sat", "↵"]
    page = Spans()
    page.feed(plot.lit_text_html(tokens, np.array([0.6, 0.1, 0.3, 0.0]), 2, lang="fr"))
    spans = page.spans
    assert [span["data-query"] for span in spans] == ["0", "1", "2", "3"]
    assert "rgba(31,119,180,1.000)" in spans[0]["style"] and "color:#fff" in spans[0]["style"]
    assert "rgba(31,119,180,0.167)" in spans[1]["style"] and "rgba(31,119,180,0.500)" in spans[2]["style"]
    assert spans[3]["style"] == "" and "ss-future" in spans[3]["class"]  # after the query: not seen, not shaded
    assert "ss-query" in spans[2]["class"] and all(span["tabindex"] == "0" for span in spans)
    assert spans[1]["title"] == "position 1 : ␣cat · attention 0,100"  # French: a decimal comma

    past = Spans()  # past the sink: key 0 unshaded, the rest over their own largest
    past.feed(plot.lit_text_html(tokens, np.array([np.nan, 0.25, 0.75, 0.0]), 2))
    assert past.spans[0]["style"] == "" and "rgba(31,119,180,1.000)" in past.spans[2]["style"]
