"""How a foreign exception is worded in a one-line error."""

import pickle

from laya_protocol.errors import cause


def test_cause_is_the_type_and_the_first_line_that_says_something_cut_to_width():
    assert cause(ValueError("\n  \nbad value here\nsecond line")) == "ValueError: bad value here"
    assert cause(OSError("x" * 500), 10) == "OSError: " + "x" * 7 + "...", "cut to width, and says so"
    assert cause(KeyError()) == "KeyError"


def test_a_first_line_that_only_introduces_the_next_keeps_them_together():
    """torch's load_state_dict says 'Error(s) in loading state_dict for Linear:' and then what is
    wrong, on the lines after: the first line alone named no key (an outside review)."""
    import torch

    try:
        torch.nn.Linear(2, 2).load_state_dict({"weight": torch.zeros(3, 2)})
    except RuntimeError as e:
        text = cause(e)
    assert text.startswith("RuntimeError: Error(s) in loading state_dict for Linear: "), text
    assert 'Missing key(s) in state_dict: "bias"' in text and "\n" not in text, text
    cut = cause(RuntimeError("Error(s) in loading:\n\tMissing keys: " + "alpha " * 60), 60)
    assert len(cut) <= len("RuntimeError: ") + 60 and cut.endswith("..."), cut
    assert not cut.removesuffix("...").endswith(("alph", "alp", "al")), "cut at a word, not in one"
    path = cause(OSError("cannot open: /data/" + "very-long-folder-name/" * 20), 80)
    assert len(path) <= len("OSError: ") + 80 and "/data/very-long-folder-name/very" in path, "a long word is kept"


def test_a_refused_pickle_is_named_for_what_it_is_never_with_advice_to_load_it():
    # the shape of torch.load(weights_only=True)'s refusal: advice first, the blocked global later
    e = pickle.UnpicklingError(
        "Weights only load failed. Re-run with weights_only=False\n\nunsupported GLOBAL posix.system\n"
    )
    text = cause(e)
    assert "weights_only" not in text and "GLOBAL posix.system" in text and "could run code" in text


def test_another_unpickling_error_keeps_its_own_words():
    """A truncated pickle, or a policy's own UnpicklingError, is not a planted one."""
    assert cause(pickle.UnpicklingError("pickle data was truncated")) == "UnpicklingError: pickle data was truncated"
