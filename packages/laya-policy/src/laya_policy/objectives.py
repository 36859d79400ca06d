"""What training optimises and how predictions are judged: pure functions over option logits.

Logits are ``[B, K]`` with ``-inf`` in padded option slots; targets are probabilities ``[B, K]``
(an expert's distribution, or one-hot labels) with zeros in padded slots.
"""

from __future__ import annotations

import torch


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -sum(target * log softmax(logits)); padded slots contribute nothing."""
    logp = torch.log_softmax(logits, -1)
    return -(target * logp.masked_fill(target == 0, 0.0)).sum(-1).mean()


def spherical_score(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean spherical score of the predicted distribution against the target (higher is better).

    S(p, q) = sum_k q_k p_k / ||p||_2: a strictly proper scoring rule, maximised only at p = q.
    """
    p = torch.softmax(logits, -1)
    return ((target * p).sum(-1) / p.norm(dim=-1)).mean()


def training_loss(logits: torch.Tensor, target: torch.Tensor, spherical_weight: float = 0.5) -> torch.Tensor:
    """Soft cross-entropy minus a weighted spherical score (both proper, so the optimum is the target)."""
    return soft_cross_entropy(logits, target) - spherical_weight * spherical_score(logits, target)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(-1) == labels).float().mean().item()


def majority_share(labels: torch.Tensor) -> float:
    """The accuracy of always answering the most common label: what a model that ignores the screen
    reaches. An accuracy at this line says nothing was read from the frames."""
    if not len(labels):
        raise ValueError("majority_share: no labels")
    return (torch.bincount(labels).max() / len(labels)).item()


def nll(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return torch.nn.functional.cross_entropy(logits, labels).item()


def expected_calibration_error(logits: torch.Tensor, labels: torch.Tensor, bins: int = 15) -> float:
    """ECE over ``bins`` equal-width bins of top-1 confidence: sum_b |acc_b - conf_b| * n_b / n."""
    probs = torch.softmax(logits, -1)
    conf, pred = probs.max(-1)
    correct = (pred == labels).float()
    edges = torch.linspace(0, 1, bins + 1)
    ece = torch.zeros(())
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (conf > lo) & (conf <= hi)
        if inside.any():
            ece += inside.float().mean() * (correct[inside].mean() - conf[inside].mean()).abs()
    return ece.item()


def fit_temperature(
    logits: torch.Tensor, labels: torch.Tensor, target: torch.Tensor | None = None, steps: int = 200
) -> float:
    """The temperature T minimising the held-out cross-entropy of softmax(logits / T) against ``target``
    (soft, as training scores it), or against ``labels`` when no target is given (LBFGS on log T)."""
    log_t = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.5, max_iter=steps, line_search_fn="strong_wolfe")
    logits = logits.detach()

    def closure():
        opt.zero_grad()
        scaled = logits / log_t.exp()
        loss = (
            soft_cross_entropy(scaled, target)
            if target is not None
            else torch.nn.functional.cross_entropy(scaled, labels)
        )
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp())
