from atari_data.schema.questions import DEFAULT_GOAL, GOALS, action_label, atari_question, format_option
from laya_protocol.games import minimal_actions


def test_question_shape_and_criteria_order():
    actions = minimal_actions("MsPacman")
    q = atari_question("MsPacman", actions)
    assert set(q) == {"action"}
    inner = q["action"]
    assert inner["type"] == "choice"
    assert list(inner["criteria"]) == list(actions)
    assert "MsPacman" in inner["instructions"] and GOALS["MsPacman"] in inner["instructions"]
    assert inner["instructions"].endswith("?")


def test_default_goal_for_games_without_one():
    q = atari_question("Seaquest", minimal_actions("Seaquest"))["action"]
    assert DEFAULT_GOAL in q["instructions"]


def test_action_labels():
    assert action_label("NOOP") == "do nothing"
    assert action_label("FIRE").startswith("press fire")
    assert action_label("LEFT") == "move left"
    assert action_label("DOWNFIRE") == "move down and fire"
    assert action_label("UPRIGHT") == "move up and right"
    assert action_label("DOWNLEFTFIRE") == "move down-left and fire"
    assert action_label("SOMETHING") == "something"
    assert format_option("LEFT", "move left") == "LEFT: move left"


def test_every_full_action_has_a_distinct_label():
    from laya_protocol.games import FULL_ACTIONS

    labels = [action_label(a) for a in FULL_ACTIONS]
    assert len(set(labels)) == len(labels)
