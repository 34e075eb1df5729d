"""The origins page and the explorer's key map on the bundled model: every number they state is the library's."""

from __future__ import annotations

import numpy as np
import pytest
from sinkscope.core.capture import Trace
from sinkscope.course import reveals
from sinkscope.experiments import writes
from sinkscope.findings import origins

from tests.helpers import array, chart, course_step, english, open_page, submit, synthetic

pytestmark = [pytest.mark.pages, pytest.mark.slow]  # see pytest.ini: which worker, and whether make check runs them


@pytest.fixture(scope="module")
def trace(smollm2: object) -> Trace:
    return english(smollm2)


def test_the_explorer_draws_key_sink_under_the_head_map_and_names_the_keys_that_take_most(trace: Trace) -> None:
    at = open_page("explorer")
    np.testing.assert_allclose(array(chart(at, "key_map")["data"][0]["z"]), trace.key_sink, atol=1e-6)
    said = " ".join(m.value for m in at.markdown)
    best = origins.receivers(trace, 1)[0]
    assert f"at position {best.position} takes {best.key_sink:.2f} of layer {best.layer}'s attention" in said
    at.toggle(key="key_map_skip_first").set_value(True).run()
    assert array(chart(at, "key_map")["data"][0]["z"]).shape == (trace.shape[0], trace.n_tokens - 1)


def test_the_origins_page_finds_the_secondary_sinks_and_the_write_that_builds_the_sink(trace: Trace) -> None:
    at = open_page("origins")
    said = " ".join(m.value for m in at.markdown)
    found = origins.secondary_sinks(trace)
    assert f"{len(found.within)} secondary sinks on this text." in said
    builder = writes.first_writes(trace).builder
    part, block = builder.part, builder.block
    assert f"Block {block}'s {'MLP' if part == 'mlp' else 'attention'} builds the first token's massive" in said
    submit(at, "Remove it")
    rate = next(m for m in at.metric if m.label.startswith("Sink rate of layers"))
    assert rate.label.startswith(f"Sink rate of layers {block + 1} and later")
    intact = float(rate.delta.split(": ")[1].rstrip("%"))
    assert float(rate.value.rstrip("%")) < intact / 2  # the sink falls without that write
    shown = next(d.value for d in at.dataframe if "removed" in d.value.columns)
    assert len(shown) == len(writes.HOWS)  # zeroed, its mean over other first tokens, its massive channel only
    assert shown["sink rate after"].iloc[0] == pytest.approx(float(rate.value.rstrip("%")), abs=0.05)
    bars = chart(at, "or_qk")["data"][0]
    assert bars["y"][0] == ("MLP " if part == "mlp" else "attention ") + str(block)  # the largest QK term


def test_a_sink_made_elsewhere_is_drawn_layer_by_layer(trace: Trace) -> None:
    at = open_page("origins")
    at.slider(key="or_position").set_value(30)
    submit(at, "Make the sink")
    lines = chart(at, "or_elsewhere")["data"]
    assert len(lines) == 4
    after = array(lines[1]["y"])
    assert np.nanmean(after[12:]) > 5 * np.nanmean(trace.key_sink[12:, 30])


def test_the_course_step_reveals_the_write_that_builds_the_sink_and_what_removing_it_does(trace: Trace) -> None:
    said = course_step("origins", "en", "english")
    builder = writes.first_writes(trace).builder
    part, block = builder.part, builder.block
    assert part == "mlp" and f"Block {block}'s MLP builds the first token's massive activation" in said
    assert f"the sink rate of layers {block + 1} and later falls from" in said


def test_the_course_step_says_so_where_a_model_shows_no_writes() -> None:
    hand_built = synthetic(np.ones((3, 4, 2), dtype=np.float32), np.zeros((2, 4)))
    found = reveals.of_origins(hand_built, None)
    assert found.truth == "none" and found.said[-1].key == "course.origins.no_writes"  # after where the sink is
