import math

import pytest
import torch

from laya_policy.objectives import (
    accuracy,
    expected_calibration_error,
    fit_temperature,
    nll,
    soft_cross_entropy,
    spherical_score,
    training_loss,
)


def test_soft_cross_entropy_by_hand_and_padding():
    logits = torch.tensor([[0.0, math.log(3.0), float("-inf")]])  # p = [0.25, 0.75, 0]
    target = torch.tensor([[0.5, 0.5, 0.0]])
    assert soft_cross_entropy(logits, target).item() == pytest.approx(-(0.5 * math.log(0.25) + 0.5 * math.log(0.75)))


def test_spherical_score_is_proper():
    target = torch.tensor([[0.2, 0.5, 0.3]])
    best = spherical_score(torch.log(target), target).item()
    for other in ([0.3, 0.4, 0.3], [0.1, 0.8, 0.1], [1 / 3] * 3):
        assert spherical_score(torch.log(torch.tensor([other])), target).item() < best
    # by hand: sum q p / ||p|| at p = q is ||q||
    assert best == pytest.approx(torch.tensor([0.2, 0.5, 0.3]).norm().item())


def test_training_loss_is_minimised_at_the_target():
    target = torch.tensor([[0.1, 0.6, 0.3, 0.0]])
    logits = torch.zeros(1, 4, requires_grad=True)
    mask = torch.tensor([[0.0, 0.0, 0.0, float("-inf")]])
    opt = torch.optim.Adam([logits], lr=0.05)
    for _ in range(800):
        opt.zero_grad()
        training_loss(logits + mask, target).backward()
        opt.step()
    assert torch.allclose(torch.softmax(logits + mask, -1), target, atol=1e-2)


def test_accuracy_nll_and_ece_by_hand():
    logits = torch.log(torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.45, 0.55]]))
    labels = torch.tensor([0, 1, 1, 0])
    assert accuracy(logits, labels) == 0.5
    assert nll(logits, labels) == pytest.approx(-(math.log(0.9) + math.log(0.4) + math.log(0.7) + math.log(0.45)) / 4)
    # bins of width 1/15: conf 0.9 (correct), 0.6 (wrong), 0.7 (correct), 0.55 (wrong), each alone in its bin
    expected = (abs(1 - 0.9) + abs(0 - 0.6) + abs(1 - 0.7) + abs(0 - 0.55)) / 4
    assert expected_calibration_error(logits, labels) == pytest.approx(expected, abs=1e-6)
    # two in one bin (0.90 right, 0.92 wrong): |0.5 - 0.91|, where per record it would be (0.10 + 0.92) / 2
    shared = torch.log(torch.tensor([[0.9, 0.1], [0.92, 0.08]]))
    assert expected_calibration_error(shared, torch.tensor([0, 1])) == pytest.approx(0.41, abs=1e-6)


def test_temperature_fit_recovers_overconfidence():
    g = torch.Generator().manual_seed(0)
    true_logits = torch.randn(4000, 5, generator=g)
    labels = torch.distributions.Categorical(logits=true_logits).sample()
    t = fit_temperature(true_logits * 3.0, labels)  # a model 3x too confident
    assert t == pytest.approx(3.0, rel=0.1)
    assert expected_calibration_error(true_logits * 3.0 / t, labels) < expected_calibration_error(
        true_logits * 3.0, labels
    )


def test_targets_are_each_records_distribution_else_one_hot_and_zero_past_its_options():
    from laya_policy.data import Example
    from laya_policy.train import targets_of

    recs = [
        {"actions": ["NOOP", "FIRE", "UP"], "label": 2},
        {"actions": ["NOOP", "FIRE"], "label": 0, "target": [0.25, 0.75]},
    ]
    examples = [Example(rec, lambda prev: None, i) for i, rec in enumerate(recs)]
    assert targets_of(examples, 4).tolist() == [[0, 0, 1, 0], [0.25, 0.75, 0, 0]]
