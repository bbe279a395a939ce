"""Real jobs under ``weave serve``, measured against the model (``python -m
weave_client.runtime.experiment``).

A miniature cluster on this machine: one rollout node (CPU set ``--rollout-cpus``) and one
training node (``--train-cpus``), as fixed pools of one node each. Two GRPO jobs that
complement each other (A: long generation, one update pass; B: short generation, several
update passes) run

1. solo, one after the other, each alone on both nodes (what a cluster without Weave does);
2. co-executed: submitted together with what their solo runs measured (phase durations,
   warm/cold switch, the gap between phases), so Weave packs them into one group, and run
   side by side under its gate.

It prints (and writes as JSON with ``--json``) iterations per node-hour of both, the measured
meta-iteration against what ``weave group analyze`` predicts from the measured durations,
warm against cold switch for the same state, the weight syncs (and a damaged sync refused and
re-sent), and, with ``--learn N``, the reference job's reward curve over N iterations.

Correctness is checked on every run, whatever its size: every rollout sampled with the
weights of its own iteration, every training consumed its own iteration's trajectories, both
jobs completed every iteration once.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from weave_client import WeaveClient
from weave_client.runtime import agentic_run, minicluster, multi_rank
from weave_client.runtime.faults import node_loss, rollout_killed_mid_sync, trainer_killed, training_node_noticed
from weave_client.runtime.harness import TOKEN, Serve, check_versions, job_args, job_cmd, phases, reference_cmd, \
    run_jobs, say, start_jobs, wait_jobs, wait_until


def span_s(events: List[Dict[str, Any]], work: str, names: List[str]) -> float:
    """From the start of the first phase of any of ``names`` to their last finish: the time
    their work held the nodes (process start-up, the same for solo and co-executed runs, left
    out; the wall clock with it is reported beside)."""
    starts, ends = [], []
    for name in names:
        fin = [e for e in events if e["job"] == name and e["kind"] == "finish"]
        first = min(fin, key=lambda e: e["time_us"])
        log = next(r for r in phases(work, name) if r.get("phase") == first["phase"] and r["iteration"] == first["iteration"])
        starts.append(first["time_us"] / 1e6 - log["compute_s"])
        ends.append(max(e["time_us"] for e in fin) / 1e6)
    return max(ends) - min(starts)


def periods(events: List[Dict[str, Any]], name: str, trim: int) -> List[float]:
    """Seconds between consecutive training finishes, without the first and last ``trim``."""
    t = [e["time_us"] for e in events if e["job"] == name and e["kind"] == "finish" and e["phase"] == "train"]
    d = [(b - a) / 1e6 for a, b in zip(t, t[1:])]
    return d[trim: len(d) - trim] if len(d) > 2 * trim + 2 else d


def profile(events: List[Dict[str, Any]], logs: List[Dict[str, Any]], name: str) -> Dict[str, float]:
    # A phase's duration as the job measured it (activation, work and offload: the time it
    # held the node), which is also what it reported to Weave.
    rollout = statistics.median(r["compute_s"] for r in logs if r.get("phase") == "rollout")
    train = statistics.median(r["compute_s"] for r in logs if r.get("phase") == "train")
    period = statistics.median(periods(events, name, 2))
    warm = statistics.median(r["switch_s"] for r in logs if r.get("switch") == "warm")
    sync = statistics.median(r["sync_s"] for r in logs if "sync_s" in r)
    sync_bytes = statistics.median(r["sync_bytes"] for r in logs if "sync_bytes" in r)
    return {"rollout_s": rollout, "train_s": train, "period_s": period, "gap_s": max(period - rollout - train, 0.0),
            "warm_s": warm, "sync_s": sync, "sync_bytes": sync_bytes}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weave", default=shutil.which("weave") or "target/release/weave")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--prompts", type=int, help="prompts per rollout (default 64; 16 with --task tool)")
    ap.add_argument("--task", choices=["sort", "tool"], default="sort",
                    help="the pair's task: sorting, or the agentic task (tool calls into sandboxes on "
                         "environment nodes; agentic_run)")
    ap.add_argument("--env-nodes", type=int, default=2, help="--task tool: environment nodes")
    ap.add_argument("--lose-env-node", action="store_true",
                    help="--task tool: then run one agentic job and lose an environment node mid-rollout")
    ap.add_argument("--rollout-cpus", default="0")
    ap.add_argument("--train-cpus", default="1")
    ap.add_argument("--learn", type=int, default=0, help="also run the reference job this many iterations")
    ap.add_argument("--trainers", type=int, default=1,
                    help="above 1: also run the reference job with this many trainer ranks and rollout workers, "
                         "its syncs along weave-sync's plan against a flat broadcast (and --learn with them)")
    ap.add_argument("--work", help="working directory (default: a new temporary one)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--kill-serve", action="store_true", help="SIGKILL and restart weave serve halfway through the first pair")
    ap.add_argument("--rounds", type=int, default=3, help="solo-solo-pair rounds; ratios are medians over rounds")
    ap.add_argument("--shaped-link", type=float, metavar="MBIT",
                    help="run on a mini cluster of network namespaces (root): the nodes joined by a link "
                         "limited to MBIT Mbit/s, which every weight sync crosses")
    ap.add_argument("--kill-trainer", action="store_true",
                    help="then run one job whose trainer is SIGKILLed between an acknowledged finish and its slack "
                         "checkpoint")
    ap.add_argument("--kill-rollout-mid-sync", action="store_true",
                    help="then run one job whose rollout worker is SIGKILLed while new weights are on their way to it")
    ap.add_argument("--lose-node", action="store_true",
                    help="then run the pair again and lose the rollout node halfway (its processes SIGKILLed)")
    ap.add_argument("--notice-train-node", action="store_true",
                    help="then run one job that checkpoints only at its end, give its training node a preemption "
                         "notice halfway, and lose the node with its host memory: the job resumes from the "
                         "checkpoint it wrote on the notice")
    a = ap.parse_args(argv)
    a.work = a.work or tempfile.mkdtemp(prefix="weave-real-")
    a.prompts = a.prompts or (16 if a.task == "tool" else 64)
    a.env_nodes = a.env_nodes if a.task == "tool" else 0
    os.makedirs(a.work, exist_ok=True)
    if a.shaped_link is None:
        return run(a, "127.0.0.1")
    why = minicluster.available()
    if why:
        raise SystemExit(f"--shaped-link: {why}")
    with minicluster.MiniCluster(a.shaped_link, a.env_nodes) as mc:
        return run(a, mc.server_ip)


def run(a, server_ip: str) -> int:
    with agentic_run.EnvHosts(a.env_nodes, a.shaped_link is not None, a.rollout_cpus) as hosts:
        a.env_addrs = hosts.addrs
        return run_on(a, server_ip, hosts)


def run_on(a, server_ip: str, hosts: "agentic_run.EnvHosts") -> int:
    serve = Serve(a.weave, a.work, server_ip, a.env_nodes)
    url = serve.start()
    ops = WeaveClient(url, TOKEN)
    out: Dict[str, Any] = {"iterations": a.iterations, "prompts": a.prompts, "rounds": [],
                           "shaped_link_mbit": a.shaped_link}
    try:
        say(f"weave serve at {url}; rollout node = CPUs {a.rollout_cpus}, training node = CPUs {a.train_cpus}")
        # Solo and co-executed runs alternate, round by round, so a slow spell of the machine
        # lands on both sides; each round's ratio is taken within the round.
        for r in range(1, a.rounds + 1):
            rnd = one_round(a, serve, ops, r)
            out["rounds"].append(rnd)
            say(f"round {r}: gain {rnd['gain']:.2f}x (steady {rnd['gain_steady']:.2f}x), meta-iteration "
                f"{rnd['meta_measured_s']:.3f} s vs {rnd['meta_predicted_from_pair_s']:.3f} predicted")
        rounds = out["rounds"]
        for key in ("gain", "gain_steady", "gain_wall", "meta_error", "meta_error_from_solo",
                    "solo_iterations_per_node_hour", "pair_iterations_per_node_hour"):
            out[key] = statistics.median(x[key] for x in rounds)
        out["switch"] = measure_trainer_switches(a, "solo-A-1", "A")
        if a.lose_env_node:
            out["env_node_lost"] = agentic_run.env_node_lost(a, serve, ops, hosts)
        if a.lose_node:
            out["node_loss"] = node_loss(a, serve, ops, rounds[0]["profile"])
        if a.kill_trainer:
            out["trainer_killed"] = trainer_killed(a, serve, ops)
        if a.kill_rollout_mid_sync:
            out["rollout_killed_mid_sync"] = rollout_killed_mid_sync(a, serve, ops)
        if a.notice_train_node:
            out["training_node_noticed"] = training_node_noticed(a, serve, ops)
        if a.trainers > 1:
            out["ranks"] = multi_rank.sync_comparison(a, url)
        if a.learn:
            out["learn"] = learn(a, url)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=2)
        out["report"] = html_report(a, ops)
        report(out)
    finally:
        serve.stop()
    return 0


def one_round(a, serve: Serve, ops: WeaveClient, r: int) -> Dict[str, Any]:
    """Solo A, then solo B, then the pair co-executed; job names end in ``-r``."""
    url, out = serve.url, {}
    solo = {k: f"solo-{k}-{r}" for k in "AB"}
    pair = {k: f"pair-{k}-{r}" for k in "AB"}
    port = 29600 + 10 * r
    # 1. Solo, one after the other (round 1's first sync is damaged once: refused and re-sent).
    t0 = time.time()
    run_jobs([job_cmd(a, url, solo["A"], "A", port, ["--submit"] + (["--corrupt-sync-once"] if r == 1 else []))])
    run_jobs([job_cmd(a, url, solo["B"], "B", port + 1, ["--submit"])])
    solo_wall = time.time() - t0
    events = ops.events()
    prof = {}
    for k in "AB":
        check_versions(events, solo[k], a.iterations)
        prof[k] = profile(events, phases(a.work, solo[k]), solo[k])
    refused = sum(x.get("refused_syncs", 0) for x in phases(a.work, solo["A"]))
    assert refused >= (r == 1), "the damaged sync was not refused"
    solo_span = span_s(events, a.work, [solo["A"]]) + span_s(events, a.work, [solo["B"]])

    # 2. The same two jobs, submitted with what they measured, co-executed.
    for k in "AB":
        p = prof[k]
        spec = {"id": pair[k], "type": "3B_4k", "iterations": a.iterations, "slo": 2.0,
                "rollout_s": p["rollout_s"], "train_s": p["train_s"], "switch_warm_s": p["warm_s"],
                "sync_s": p["gap_s"]}
        if a.task == "tool":
            spec.update(agentic_run.declaration(a, k))
        decision = ops.submit(spec)
        assert decision["job"]["state"] == "running", f"{pair[k]} was not admitted: {decision['job']}"
        out[f"decision_{k}"] = decision["decision"]["kind"]
    groups = {ops.job(pair[k])["job"]["group"] for k in "AB"}
    assert len(groups) == 1, f"the pair was not packed into one group: {groups}"
    t0 = time.time()
    running = start_jobs([job_cmd(a, url, pair[k], k, port + 2 + i, []) for i, k in enumerate("AB")])
    if a.kill_serve and r == 1:
        # SIGKILL weave serve mid-run and start it again on its store: the jobs' gate
        # calls ride it out and nothing acknowledged is lost (checked below).
        wait_until(lambda: ops.job(pair["A"])["job"]["completed_iterations"] >= a.iterations // 2, 600)
        serve.kill()
        time.sleep(1.0)  # down for a moment, as a crashed server is
        serve.start()
        out["serve_killed_at"] = ops.job(pair["A"])["job"]["completed_iterations"]
    wait_jobs(running)
    pair_wall = time.time() - t0
    events = ops.events()
    for k in "AB":
        check_versions(events, pair[k], a.iterations)
    pair_span = span_s(events, a.work, list(pair.values()))
    pair_prof = {k: profile(events, phases(a.work, pair[k]), pair[k]) for k in "AB"}
    # What each runtime reported holding in host memory, against the server's ledger model.
    out["host_memory"] = {k: ops.job(pair[k])["job"].get("host_memory") for k in "AB"}
    if a.task == "tool":
        # What the gate heard from the drivers' environment reports, beside the declarations.
        out["environment"] = {k: ops.job(pair[k])["job"].get("environment") for k in "AB"}
    meta_measured = statistics.median(periods(events, pair["A"], 3) + periods(events, pair["B"], 3))

    # 3. The model's prediction: from what the solo runs measured (what admission was told)
    # and from the durations measured in the co-executed run itself (the schedule model
    # checked on its own inputs). A job's own time between its phases (sync, gate round
    # trips) is what its solo run showed; in the pair the same gap also holds waits.
    for k in "AB":
        pair_prof[k]["gap_s"] = prof[k]["gap_s"]
    predicted = {w: predict(a, p, f"group-{w}-{r}.json") for w, p in (("solo", prof), ("pair", pair_prof))}

    per_node_hour = lambda seconds: 2 * a.iterations / (2 * seconds / 3600)  # two nodes
    out.update({
        "profile": prof, "pair_profile": pair_prof, "solo_span_s": solo_span, "pair_span_s": pair_span,
        "solo_wall_s": solo_wall, "pair_wall_s": pair_wall,
        "solo_iterations_per_node_hour": per_node_hour(solo_span),
        "pair_iterations_per_node_hour": per_node_hour(pair_span), "gain": solo_span / pair_span,
        "gain_wall": solo_wall / pair_wall, "meta_measured_s": meta_measured,
        "meta_predicted_s": predicted["solo"][0], "meta_predicted_from_pair_s": predicted["pair"][0],
        "predicted_method": predicted["pair"][1], "meta_error": meta_measured / predicted["pair"][0] - 1,
        "meta_error_from_solo": meta_measured / predicted["solo"][0] - 1,
        "gain_steady": (prof["A"]["period_s"] + prof["B"]["period_s"]) / meta_measured,
        "refused_syncs": refused,
    })
    return out


def html_report(a, ops: WeaveClient) -> str:
    """The server's events of the whole run, saved and drawn by ``weave report --server``."""
    events = os.path.join(a.work, "events.json")
    with open(events, "w") as f:
        json.dump(ops.events(), f)
    html = os.path.join(a.work, "report.html")
    subprocess.run([a.weave, "report", "--server", events, "--output", html], check=True, capture_output=True)
    return html


def predict(a, prof: Dict[str, Dict[str, float]], file: str) -> "tuple[float, str]":
    """``weave group analyze`` on the two jobs' measured durations, switches and gaps."""
    group = {"member": [{"rollout_s": prof[k]["rollout_s"], "train_s": prof[k]["train_s"], "nodes": [0],
                         "switch_warm_s": prof[k]["warm_s"], "sync_s": prof[k]["gap_s"]} for k in "AB"]}
    path = os.path.join(a.work, file)
    with open(path, "w") as f:
        json.dump(group, f)
    analyzed = json.loads(subprocess.run([a.weave, "group", "analyze", "--file", path, "--json"],
                                         check=True, capture_output=True, text=True).stdout)
    return analyzed["timing"]["meta_iteration"] / 1e6, analyzed["timing"]["method"]


def measure_trainer_switches(a, name: str, kind: str) -> Dict[str, float]:
    from .checkpointing import checkpoint_path
    from .grpo_job import parse_args
    from .job_process import trainer_build
    from .resident import measure_switches

    ja = parse_args(["--server", "x", "--job", name, "--port", "1", "--dir", os.path.join(a.work, name),
                "--prompts", str(a.prompts), *job_args(a, kind)])
    return measure_switches(f"{name}/trainer", trainer_build(ja), checkpoint_path(ja.dir))


def learn(a, url: str) -> Dict[str, Any]:
    """The reference job (4 digits, 32 prompts x 8; with ``--task tool`` the agentic job A of
    the pair, 16 prompts x 8) for ``a.learn`` iterations under Weave."""
    name = "learn"
    task = [*job_args(a, "A"), "--prompts", str(a.prompts)] if a.task == "tool" else []
    cmd = [*reference_cmd(a, url, name, a.learn, 29630), "--submit", "--checkpoint-every", "50", *task]
    if a.trainers > 1:
        plan = multi_rank.plan_file(a, "topology-aware", a.trainers, "plan-learn.json")
        cmd += ["--trainers", str(a.trainers), "--sync-plan", plan["path"]]
    t0 = time.time()
    run_jobs([cmd])
    minutes = (time.time() - t0) / 60
    rewards = [r["mean_reward"] for r in phases(a.work, name) if r.get("phase") == "rollout"]
    window = 10
    smooth = [statistics.mean(rewards[max(0, i - window + 1): i + 1]) for i in range(len(rewards))]
    reached = next((i for i, r in enumerate(smooth) if i >= window - 1 and r >= 0.9), None)
    return {"iterations": a.learn, "minutes": minutes, "first_reward": rewards[0],
            "final_reward_10": smooth[-1], "iteration_reaching_0.9_10": reached}


def sync_rows(o: Dict[str, Any], p: Dict[str, Dict[str, float]]) -> List["tuple[str, str]"]:
    """On a shaped link: each job's sync against the time its bytes take at the link's rate."""
    mbit = o.get("shaped_link_mbit")
    if mbit is None:
        return [("  links", "not shaped (loopback): run with --shaped-link MBIT as root for a slow inter-pool link")]
    rows = []
    for k in "AB":
        line_s = p[k]["sync_bytes"] * 8 / (mbit * 1e6)
        rows.append((f"  sync of {k} over the {mbit:g} Mbit/s link, round 1",
                     f"{p[k]['sync_s']:.4f} s for {p[k]['sync_bytes'] / 1e6:.3f} MB; {line_s:.4f} s at line rate "
                     f"({line_s / p[k]['sync_s']:.0%} of it)"))
    return rows


def host_memory_text(k: str, h: Optional[Dict[str, Any]]) -> str:
    """A job's reported host memory against the ledger's model, as the report prints it."""
    if not h:
        return f"{k}: not reported"
    mb = lambda b: "-" if b is None else f"{b / 1e6:.1f} MB"
    gb = lambda b: f"{b / 1e9:.0f} GB"
    verdict = "within the model" if h["within_model"] else "ABOVE the model: the ledger under-counts"
    return (f"{k}: rollout {mb(h['rollout_reported'])} / {gb(h['rollout_modelled'])}, "
            f"trainer {mb(h['train_reported'])} / {gb(h['train_modelled'])}, {verdict}")


def report(o: Dict[str, Any]) -> None:
    first = o["rounds"][0]
    p = first["profile"]
    each = lambda key, fmt: ", ".join(fmt.format(x[key]) for x in o["rounds"])
    rows = [
        ("job A (rollout-heavy) rollout / train / gap s, round 1",
         f"{p['A']['rollout_s']:.3f} / {p['A']['train_s']:.3f} / {p['A']['gap_s']:.3f}"),
        ("job B (training-heavy) rollout / train / gap s, round 1",
         f"{p['B']['rollout_s']:.3f} / {p['B']['train_s']:.3f} / {p['B']['gap_s']:.3f}"),
        ("placement of the pair", f"A {first['decision_A']}, B {first['decision_B']}"),
        ("iterations per node-hour, solo one after the other", f"{o['solo_iterations_per_node_hour']:.0f}"),
        ("iterations per node-hour, co-executed", f"{o['pair_iterations_per_node_hour']:.0f}"),
        ("gain over the work span, median (each round)", f"{o['gain']:.2f}x ({each('gain', '{:.2f}')})"),
        ("  steady state; wall clock incl. start-up", f"{o['gain_steady']:.2f}x; {o['gain_wall']:.2f}x"),
        ("meta-iteration measured s (each round)", each("meta_measured_s", "{:.3f}")),
        ("  predicted from the pair's measured phases", f"{each('meta_predicted_from_pair_s', '{:.3f}')} "
         f"(median error {o['meta_error']:+.1%}, {first['predicted_method']})"),
        ("  predicted from the solo runs (admission's view)", f"{each('meta_predicted_s', '{:.3f}')} "
         f"(median error {o['meta_error_from_solo']:+.1%})"),
        ("switch of A's trainer state, warm / cold s", f"{o['switch']['warm_s']:.4f} / {o['switch']['cold_s']:.4f} "
         f"({o['switch']['cold_s'] / o['switch']['warm_s']:.0f}x, {o['switch']['bytes']} B)"),
        ("host memory per node reported / ledger's model, round 1",
         "; ".join(host_memory_text(k, first["host_memory"][k]) for k in "AB")),
        ("weight sync A / B, median s, round 1", f"{p['A']['sync_s']:.4f} / {p['B']['sync_s']:.4f}"),
        *sync_rows(o, p),
        ("damaged syncs refused and re-sent", f"{first['refused_syncs']}"),
        ("weave serve SIGKILLed during pair 1 after A's iteration",
         f"{first.get('serve_killed_at', 'not asked')}; every iteration trained once, on its own version"),
    ]
    if "environment" in first:
        rows += agentic_run.rows(o)
    if "node_loss" in o:
        nl = o["node_loss"]
        rows.append(("rollout node lost mid-run: resumed from (acknowledged lost)",
                     ", ".join(f"{k} {nl[k]['resumed_from']} ({nl[k]['acknowledged_lost']})" for k in "AB")))
        rows.append(("  mean reward 3 iterations before / after",
                     ", ".join(f"{k} {nl[k]['reward_before']:.3f} / {nl[k]['reward_after']:.3f}" for k in "AB")))
    if "trainer_killed" in o:
        tk = o["trainer_killed"]
        rows.append(("trainer SIGKILLed before its checkpoint: resumed from (acknowledged lost)",
                     f"{tk['resumed_from']} of {tk['acknowledged_at_kill']} ({tk['acknowledged_lost']})"))
    if "rollout_killed_mid_sync" in o:
        rk = o["rollout_killed_mid_sync"]
        rows.append(("rollout worker SIGKILLed mid-sync: resumed from (acknowledged lost)",
                     f"{rk['resumed_from']} of {rk['version_in_flight']} ({rk['acknowledged_lost']})"))
    if "training_node_noticed" in o:
        tn = o["training_node_noticed"]
        rows.append(("training node noticed, then lost with its host memory: resumed from (acknowledged lost)",
                     f"{tn['resumed_from']} of {tn['acknowledged_at_loss']} ({tn['acknowledged_lost']}); "
                     f"{tn['checkpoints_in_phase']} checkpoints in phases, {tn['checkpoint_s']:.4f} s each"))
    if any(x["gain"] > 2.0 for x in o["rounds"]):
        rows.append(("WARNING", "a round's gain is above the 2.0 a perfect pair allows: the machine's speed "
                                "changed between its runs; trust the median less"))
    if "ranks" in o:
        rows += multi_rank.rows(o["ranks"])
    if "learn" in o:
        le = o["learn"]
        rows.append(("reference job: reward first / last 10", f"{le['first_reward']:.3f} / {le['final_reward_10']:.3f}"))
        rows.append(("  iteration where the 10-mean reaches 0.9; minutes",
                     f"{le['iteration_reaching_0.9_10']}; {le['minutes']:.1f} for {le['iterations']}"))
    rows.append(("the server's events, drawn", o["report"]))
    width = max(len(r[0]) for r in rows)
    for k, v in rows:
        say(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
