"""``api.client.cli.context.FitTable``: what a table leaves out, wraps and keeps whole at a given width."""

from __future__ import annotations

from api.client.cli.context import Column, FitTable

REASON = "waiting for 8 idle GPUs; project team-b holds 12 of fair share 16"


def _jobs() -> FitTable:
    table = FitTable(
        [Column("NAME"), Column("AGE", drop=2), Column("ETA", drop=1), Column("REASON", wraps=True)]
    )
    table.add_row("resnet-elastic", "10m", "in ~5 min", REASON)
    return table


def test_an_empty_table_is_its_header() -> None:
    assert FitTable([Column("NAME"), Column("REASON", wraps=True)]).lines(80) == ["NAME  REASON"]


def test_every_column_on_one_line_when_wide_or_roomy() -> None:
    assert _jobs().lines(None)[1] == f"resnet-elastic  10m  in ~5 min  {REASON}"
    assert _jobs().lines(200) == _jobs().lines(None)


def test_optional_columns_go_first_then_the_reason_wraps_in_its_column() -> None:
    lines = _jobs().lines(45)
    assert lines[0].split() == ["NAME", "ETA", "REASON"]  # AGE (drop=2) left out before ETA
    assert all(len(line) <= 45 for line in lines)
    assert lines[1].startswith("resnet-elastic  in ~5 min  waiting")
    assert " ".join(" ".join(lines[1:]).split()[4:]) == REASON  # whole, in order


def test_a_column_too_narrow_for_a_word_puts_the_text_under_its_row() -> None:
    table = FitTable([Column("NODE"), Column("REPLICAS", wraps=True)])
    table.add_row("node-0", "computer-vision-research/resnet-elastic-imagenet-large#0 team-b/j1#0")
    lines = table.lines(40)
    assert lines == [
        "NODE",
        "node-0",
        "    computer-vision-research/resnet-elastic-imagenet-large#0",
        "    team-b/j1#0",
    ]


def test_names_and_counts_are_never_cut_even_past_the_width() -> None:
    table = FitTable([Column("NAME"), Column("REPLICAS")])
    table.add_row("a-very-long-job-name-that-does-not-fit", "1024/1024/1024")
    assert table.lines(20)[1] == "a-very-long-job-name-that-does-not-fit  1024/1024/1024"
