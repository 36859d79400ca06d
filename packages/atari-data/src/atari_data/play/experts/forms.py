"""The forms --expert takes, as help texts and errors say them (one home for generate, dagger and
the experts' own refusals)."""

#: The experts that play any ALE game.
ANY_GAME_EXPERTS = "planner, sb3:PATH, cleanrl:PATH or hub:REPO"
#: Every form of --expert.
EXPERT_FORMS = "builtin, sb3:PATH, cleanrl:PATH, hub:REPO or planner[/K][:BASE]"
