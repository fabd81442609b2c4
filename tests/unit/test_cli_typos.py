"""A mistyped option is named with the nearest known one, by the verb it was given to, with that verb's usage
(issue 48 item 3); a word the verb does not take is said by the verb too, not the top level."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verify.cli import build_parser, main, unknown_option, verb_parser


def refused(capsys, argv: list) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, said, usage", [
    (["verify", "--locl"], "unknown option --locl; did you mean --local?", "usage: tunefleet verify"),
    (["verify", "--local", "--no-hstory"], "unknown option --no-hstory; did you mean --no-history?",
     "usage: tunefleet verify"),
    (["history", "--hots", "gpu01"], "unknown option --hots; did you mean --host?", "usage: tunefleet history"),
    (["site", "-i", "inv", "--chek"], "unknown option --chek; did you mean --check?", "usage: tunefleet site"),
    (["verify", "--local", "--zzzzzz"], "unknown option --zzzzzz", "usage: tunefleet verify"),
])
def test_a_mistyped_option_is_named_with_the_nearest_one_and_its_verbs_usage(capsys, argv, said, usage):
    err = refused(capsys, argv)
    assert said in err and usage in err
    assert "one of the arguments" not in err  # the typo is said first, not the required option it hid
    if "did you mean" not in said:
        assert "did you mean" not in err


def test_an_extra_word_is_refused_by_the_verb_that_got_it(capsys):
    err = refused(capsys, ["verify", "--local", "extra"])
    assert "usage: tunefleet verify" in err and "unrecognized arguments: extra" in err
    assert "{verify,report" not in err  # not the top level's usage


def test_values_abbreviations_and_remainders_are_not_typos():
    parser = build_parser("verify")
    verify = verb_parser(parser, "verify")
    assert unknown_option(verify, ["--out", "--weird-dir-name", "--local"]) is None  # a value, not an option
    assert unknown_option(verify, ["--loc", "--out=x", "-ifoo"]) is None  # abbreviation, =value, attached value
    assert unknown_option(verify, ["--local", "--", "--anything"]) is None
    bench = verb_parser(build_parser("bench"), "bench")
    assert unknown_option(bench, ["nccl", "--size", "1G"]) is None  # the benchmark's own options
    assert unknown_option(parser, ["verify", "--local"]) is None  # the verb's words are the verb's


@given(st.lists(st.text(alphabet="-abcdefghilnorstuy=", max_size=12), max_size=6))
def test_any_command_line_is_either_parsed_or_refused_with_exit_2(words):
    """No word list makes the typo check raise anything but argparse's own exit."""
    try:
        build_parser("verify").parse_known_args(["verify", *words])
    except SystemExit as stop:
        assert stop.code in (0, 2)  # 0: a word that spells --help
