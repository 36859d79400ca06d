"""`laya-eval`: play any Atari policy under a recorded protocol and score it fairly.

Exit codes: 0 all games scored; 1 the policy failed on some game (each failure is recorded in
the results with the offending value); 2 bad input (one line, `error: ...`).
"""

from __future__ import annotations

import argparse
import sys

from laya_eval.doom import EPISODES as DOOM_EPISODES
from laya_eval.doom import OUT as DOOM_OUT
from laya_eval.doom import evaluate_doom
from laya_eval.doom import markdown as doom_markdown
from laya_eval.errors import EvalError
from laya_eval.evaluate import RunConfig
from laya_eval.jsonfile import json_flag
from laya_eval.policies import POLICY_TIMEOUT
from laya_eval.stats import BOOTSTRAPS, CONFIDENCE
from laya_protocol import doom
from laya_protocol.bars import quiet_library_bars
from laya_protocol.config import add_options, add_version, from_args
from laya_protocol.errors import one_line, os_error_exit, stopped, terminations_raised
from laya_protocol.protocol import FRAMESKIP, STICKY_ACTIONS
from laya_protocol.seeds import EVAL_SEED_BASE

EXAMPLES = """examples:
  laya-eval run --policy random --games Pong,Breakout --episodes 10 --out results.json
  laya-eval run --policy constant:FIRE --games Breakout --cap none --out fire.json
  laya-eval run --policy 'cmd:python3 /path/to/my_policy.py --size 512' --games Pong --out mine.json
      (any program speaking the stdio protocol; packages/laya-eval/examples/stdio_policy.py is one)
  laya-eval run --policy mypkg.policies:make_policy --policy-kwargs '{"size": 512}' --games Pong --out mypkg.json
  laya-eval run --policy random --games Pong --action-set full --bootstrap task --out full.json
  (each run resumes its --out, results.json by default: a file made with other settings is refused)
  laya-eval report results.json --out report/
  laya-eval report baseline.json candidate.json --out report/    # both on every figure
  laya-eval compare baseline.json candidate.json --out report/   # + improvement.png
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="laya-eval",
        description="The independent judge of Atari policies: plays "
        "ALE v5 under a recorded protocol, normalises scores against random and expert "
        "baselines, flags games whose scores are not skill, and reports robust statistics.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(p, "laya-eval")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="play a policy on some games and write results.json",
        description="Play N episodes per game in lockstep (seeds SEED_BASE+i), ALE v5 defaults: "
        f"sticky actions {STICKY_ACTIONS}, frameskip {FRAMESKIP}, the minimal action set (--action-set full: "
        "all 18), auto-FIRE after "
        "reset and lost lives "
        "for games with FIRE (not decisions; rewards count). A random baseline is measured in the "
        "same run. The results file is rewritten after each game; the same command again skips "
        "finished games.",
    )
    add_options(r, RunConfig)
    mode = r.add_mutually_exclusive_group()
    mode.add_argument(
        "--greedy",
        dest="greedy",
        action="store_true",
        default=RunConfig.greedy,
        help="take the most probable action of a policy that returns probabilities (default)",
    )
    mode.add_argument("--sample", dest="greedy", action="store_false", help="draw from its probabilities instead")

    rep = sub.add_parser(
        "report",
        help="markdown tables and rliable-style figures of one or more results files",
        description="The markdown report of each results file; with --out, also normalised.png "
        "(per-game scores with intervals, flagged games hatched), aggregates.png (median, IQM, mean, "
        f"optimality gap with {CONFIDENCE} intervals, one row per file) and profile.png (performance "
        f"profiles with {CONFIDENCE} bands), every file on each figure.",
    )
    rep.add_argument("results", nargs="+", help="results files (several: drawn side by side)")
    rep.add_argument("--out", help="folder for report.md and the figures (default: print markdown)")
    rep.add_argument(
        "--bootstrap", choices=BOOTSTRAPS, help="recompute the intervals this way (default: as the run did)"
    )

    c = sub.add_parser(
        "compare",
        help="per-game differences and probability of improvement of B over A",
        description="Per-game scores of two results files played under the same protocol (refused "
        "otherwise), and P(B > A): per game, the chance an episode of B outscores one of A (raw "
        "scores: a per-game comparison needs no normalisation, so different baselines cannot bias it), "
        "averaged over the games both scored, with a bootstrap interval.",
    )
    c.add_argument("a", help="results file A (the reference)")
    c.add_argument("b", help="results file B (the candidate)")
    c.add_argument(
        "--bootstrap", choices=BOOTSTRAPS, default="episode", help="interval resampling (default %(default)s)"
    )
    c.add_argument("--out", help="folder for improvement.png (the probability-of-improvement plot)")

    sub.add_parser(
        "policies",
        help="list the policies registered under laya_eval.policies",
        description="List the policies registered under the entry-point group laya_eval.policies (the "
        "NAME of --policy NAME[:ARG]), each with the factory it names (module:attr).",
    )
    dm = sub.add_parser(
        "doom",
        help="play a policy on a ViZDoom scenario against expert, random and always-ATTACK",
        description="ViZDoom as a second platform (needs laya-eval[vizdoom]): the policy and three "
        "baselines (labels-buffer expert, random buttons, always ATTACK) play the same seeded "
        "episodes; mean reward, kill rate, steps per episode, action mix and a normalised score.",
    )
    dm.add_argument(
        "--policy", required=True, help="as for run: random, constant:ATTACK, module:attr, cmd:..., laya:CKPT"
    )
    dm.add_argument("--scenario", default=doom.SCENARIO, help="the ViZDoom scenario (default %(default)s)")
    dm.add_argument(
        "--episodes",
        type=int,
        default=DOOM_EPISODES,
        help="seeded episodes each of the four plays (default %(default)s)",
    )
    dm.add_argument(
        "--seed-base", type=int, default=EVAL_SEED_BASE, help="episode i is seeded seed_base + i (default %(default)s)"
    )
    dm.add_argument("--sample", action="store_true", help="sample from returned probabilities instead of the top one")
    dm.add_argument(
        "--timeout",
        type=float,
        default=POLICY_TIMEOUT,
        help="seconds a cmd: policy may take per call before it is killed (default %(default)s)",
    )
    dm.add_argument("--policy-kwargs", type=json_flag, default={}, help="JSON object passed to the policy factory")
    dm.add_argument("--out", default=DOOM_OUT, help="the results file, written whole at the end (default %(default)s)")
    return p


def cmd_run(a) -> int:
    from laya_eval.evaluate import evaluate
    from laya_eval.report import markdown

    cfg = from_args(RunConfig, a)
    results = evaluate(cfg)
    print(markdown(results))
    failed = results["summary"].get("failed", [])
    if failed:
        for g in failed:
            print(one_line(f"failed: {g}: {results['games'][g]['error']}"), file=sys.stderr)
        return 1
    return 0


def cmd_report(a) -> int:
    from laya_eval.evaluate import load_results
    from laya_eval.report import MAX_DRAWN, markdown_all, write_report

    if a.out is not None and len(a.results) > MAX_DRAWN:  # before 600 files are read
        raise EvalError(
            f"{len(a.results)} results files: at most {MAX_DRAWN} are drawn on one figure; "
            "pass fewer, or leave out --out for the markdown of all",
            field="--out",
        )
    runs = [load_results(path, bootstrap=a.bootstrap) for path in a.results]
    if len(runs) > 1:  # figures name each file, so two runs of one policy can be told apart
        for run, path in zip(runs, a.results, strict=True):
            run["_file"] = path
    if a.out is not None:
        for path in write_report(runs, a.out):
            print(path)
    else:
        print(markdown_all(runs))
    return 0


def cmd_compare(a) -> int:
    from laya_eval.compare import compare, markdown
    from laya_eval.report import out_folder, write_improvement

    if a.out is not None:
        out_folder(a.out, make=False)  # before the table is printed: a bad --out is the run's only line
    result = compare(a.a, a.b, bootstrap=a.bootstrap)
    print(markdown(result))
    if a.out is not None:
        print(write_improvement(result, a.out))
    return 0


def cmd_policies(a) -> int:
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="laya_eval.policies"), key=lambda e: e.name):
        print(f"{ep.name:<12} {ep.value}")
    return 0


def cmd_doom(a) -> int:
    results = evaluate_doom(
        a.policy, a.scenario, a.episodes, a.seed_base, not a.sample, a.policy_kwargs, a.out, a.timeout
    )
    print(doom_markdown(results))
    if "error" in results:
        print(one_line(f"failed: {results['game']}: {results['error']}"), file=sys.stderr)
        return 1
    return 0


COMMANDS = {"run": cmd_run, "report": cmd_report, "compare": cmd_compare, "policies": cmd_policies, "doom": cmd_doom}


@terminations_raised()
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_library_bars()  # for a policy it plays too: laya:ORG/NAME drew the Hub client's download bar
    try:
        return COMMANDS[args.command](args)
    except EvalError as e:
        print(f"error: {e.render()}", file=sys.stderr)
        return 2
    except OSError as e:
        return os_error_exit(e)
    except KeyboardInterrupt as e:
        how, code = stopped(e)
        resumes = args.command == "run"  # the one command that keeps what it finished (doom writes at the end)
        print(f"{how}; the same command again resumes from the results file" if resumes else how, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
