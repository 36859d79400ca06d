"""Playing games: ALE under the protocol, ViZDoom, the experts, and mapping recorded actions."""
