"""End-to-end in headless chromium: a repetition penalty set in the settings panel is a stage of the Sampling
view; a bad penalty is one line; beam search draws its tree and hypotheses."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import T, goto, open_settings, open_tab, open_view, prefill, see
from tests.support.ui_server import ARTIFACTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def set_box(page: Page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(value)
    box.press("Tab")  # leaving the box applies the panel (a multi-line box takes Enter as a new line)


def apply_box(page: Page, elem_id: str, value: str, applied: str) -> None:
    """Set a box of the settings panel until the panel's status line says `applied`: typed into the panel
    right after it unfolds (while the page is busy), a box can be drawn again with its old value, and
    leaving it then applies that one; a user sees it in the status line and types again (3 tries)."""
    for attempt in range(3):
        set_box(page, elem_id, value)
        try:
            expect(page.locator("#decoding-status")).to_contain_text(applied, timeout=T // 3)
            return
        except AssertionError:
            if attempt == 2:
                raise


def test_a_repetition_penalty_is_a_stage_of_the_sampling_view(page: Page, app_url):  # noqa: F811
    goto(page, app_url)
    open_settings(page)
    apply_box(page, "repetition-penalty", "0", "repetition-penalty must be a number > 0")
    apply_box(page, "repetition-penalty", "1.3", "repetition penalty 1.3")
    prefill(page, "Say hello hello hello", max_new=8)
    open_tab(page, "Sampling")
    row = page.locator('#chain-table tr[data-stage="repetition penalty"]')
    expect(row).to_be_visible(timeout=T)
    assert int(row.locator("td").nth(3).inner_text().replace(",", "")) > 0  # it moved the logits of seen tokens
    see(page, "#sampling-bars")  # a plot out of sight is drawn when it comes into sight (inspector.ui.bundle)
    expect(page.locator("#sampling-bars")).to_contain_text("repetition penalty")
    expect(page.locator("#sampling-bars")).to_contain_text("Sampling chain")
    page.screenshot(path=str(ARTIFACTS / "ui_sampling_chain.png"), full_page=True)


def test_beam_search_draws_its_tree(page: Page, app_url):  # noqa: F811
    goto(page, app_url)
    page.locator("#prompt textarea").fill("The capital of France is")
    page.locator("#max-new-tokens input").fill("6")
    open_settings(page)
    apply_box(page, "num-beams", "3", "Beams tab: 3 beams")
    open_view(page, "Beams")
    page.locator("#beams-run").click()
    expect(page.locator("#beams-status")).to_contain_text("3 beams", timeout=T)
    expect(page.locator("#beam-table tbody tr")).to_have_count(3, timeout=T)
    expect(page.locator("#beams-tree")).to_contain_text("Beam search, 3 beams")
    page.screenshot(path=str(ARTIFACTS / "ui_beams.png"), full_page=True)


def test_the_same_seed_and_settings_give_the_same_tokens_in_the_ui_the_cli_and_a_run_link(page: Page, app_url,  # noqa: F811
                                                                                         capsys):
    import json

    from inspector.commands.cli import main
    from tests.support.browser import step

    goto(page, app_url)
    open_settings(page)
    apply_box(page, "repetition-penalty", "1.3", "repetition penalty 1.3")
    apply_box(page, "no-repeat-ngram", "2", "no repeat ngram size 2")
    apply_box(page, "bad-words", "the", "bad words")
    for applied in ("repetition penalty 1.3", "no repeat ngram size 2"):  # the whole panel is applied each time
        expect(page.locator("#decoding-status")).to_contain_text(applied, timeout=T)
    used = page.locator("#sampling-info")  # the Sampling view names the settings the server drew with
    for attempt in range(3):  # as apply_box: typed values a redraw lost are typed again, as a user would
        for box, value in (("#temperature input[type=number]", "0.9"), ("#seed input", "11")):
            page.locator(box).fill(value)
            page.locator(box).press("Tab")
        prefill(page, "Name three colors.", max_new=8)
        open_tab(page, "Sampling")
        try:
            expect(used).to_contain_text("temperature 0.9", timeout=T // 3)
            expect(used).to_contain_text("seed 11", timeout=T // 3)
            break
        except AssertionError:
            if attempt == 2:
                raise
    for k in (1, 2, 3):
        step(page, k, max_new=8)
    expect(used).to_contain_text("temperature 0.9")  # every step drew with them
    expect(used).to_contain_text("seed 11")
    ui_ids = [int(x) for x in page.locator(".ii-chip.ii-gen").evaluate_all("els => els.map(e => e.dataset.id)")]
    assert len(ui_ids) == 4

    assert main(["run", "--prompt", "Name three colors.", "--chat", "--max-new-tokens", "4", "--temperature", "0.9",
                 "--seed", "11", "--repetition-penalty", "1.3", "--no-repeat-ngram-size", "2", "--bad-words", "the",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["generated_ids"] == ui_ids

    page.locator("#link-btn").click()
    url = page.locator("#run-link textarea, #run-link input").first.input_value(timeout=T)
    assert "repetition_penalty=1.3" in url and "no_repeat_ngram_size=2" in url  # the run's RunRequest fields
    fresh = page.context.new_page()
    fresh.goto(url, timeout=T)
    expect(fresh.locator("#status-line")).to_contain_text("opened from a link", timeout=T)
    linked = [int(x) for x in fresh.locator(".ii-chip.ii-gen").evaluate_all("els => els.map(e => e.dataset.id)")]
    assert linked == ui_ids
    open_settings(fresh)
    expect(fresh.locator("#repetition-penalty input")).to_have_value("1.3")
