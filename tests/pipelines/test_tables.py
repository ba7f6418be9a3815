"""The shared cells and commands of the results pages."""

from contrasuite.pipelines.tables import mean_std, page_command


def test_mean_std_over_seeds():
    assert mean_std([]) == "-"
    assert mean_std([0.5], scale=100) == "50.00"
    assert mean_std([1.0, 2.0, 3.0], digits=1) == "2.0 ± 1.0"


def test_page_command_leaves_out_render_only_flags_and_quotes():
    argv = ["--seeds", "0", "1", "--table-only", "--note", "two words", "--report-only", ""]
    assert page_command("graph", argv) == "contrasuite compare graph --seeds 0 1 --note 'two words'"
