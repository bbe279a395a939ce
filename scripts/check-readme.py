#!/usr/bin/env python3
"""The README's table rows whose commands run in seconds, re-run: each row's figures are
computed from the command's JSON output, formatted as the README writes them, and must appear
in that row (CI runs this, so a figure that went stale fails the build instead of misleading a
reader). Rows measured on real processes or timed (the server, real jobs, weight sync, the
timing benchmark's 100,000 random groups) are not checked here; their tests or their pages say
where they come from.

Usage: scripts/check-readme.py [path to the weave binary, default target/debug/weave]
Needs ../shared/data/rollmux/wild.trace beside the project (every CI run has it)."""

import json
import os
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
os.chdir(root)
weave = sys.argv[1] if len(sys.argv) > 1 else "target/debug/weave"
WILD = "../shared/data/rollmux/wild.trace"
SEEDS = (1, 2, 3)


def run(*args):
    out = subprocess.run([weave, *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"weave {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def policies(report):
    return {p["policy"]: p for p in report["policies"]}


def x(v):
    return f"{v:.2f}x"


def pct(v):
    return f"{100 * v:.0f}%"


def slashed(values, fmt):
    return " / ".join(fmt(v) for v in values)


def builtin():
    w = policies(run("simulate"))["weave"]
    return [f"weave {x(w['vs_solo_disagg'])} solo-disagg, {x(w['vs_colocated'])} colocated, "
            f"{pct(w['slo_attainment_jobs'])} of jobs within SLO"]


_wild = {}


def wild(seed):
    if seed not in _wild:
        _wild[seed] = policies(run("simulate", "--trace", WILD, "--seed", str(seed)))
    return _wild[seed]


def wild_rows():
    ws = [wild(s)["weave"] for s in SEEDS]
    slo = {pct(w["slo_attainment_jobs"]) for w in ws}
    return [f"{slashed([w['vs_colocated'] for w in ws], x)} colocated, "
            f"{slashed([w['vs_solo_disagg'] for w in ws], x)} solo-disagg, {'/'.join(sorted(slo))} within SLO"]


def papers_weave():
    ws = [wild(s)["weave-disagg-only"] for s in SEEDS]
    return [f"{slashed([w['vs_colocated'] for w in ws], x)} colocated"]


def prototype():
    w = {p["policy"]: p for p in run("simulate", "--model", "prototype", "--trace", WILD)["policies"]}["weave"]
    return [f"cost {x(w['cost_ratio_vs_solo_disagg'])} solo-disagg / {x(w['cost_ratio_vs_colocated'])} colocated; "
            f"iterations per cost {x(w['vs_solo_disagg'])} / {x(w['vs_colocated'])}"]


def staleness():
    rows = run("sweep", "staleness")
    ipd = lambda reports, name: next(r for r in reports if r["policy"] == name)["iterations_per_k_dollars"]
    half = next(r for r in rows if r["setting"].startswith("50% of jobs at k = 1"))["reports"]
    weave = ipd(half, "weave")
    best = max(ipd(half, p) for p in ("solo-disagg", "colocated", "solo-async"))
    slo = {pct(next(r for r in row["reports"] if r["policy"] == "weave")["slo_attainment_jobs"])
           for row in rows if "at k = 1" in row["setting"]}
    return [f"{x(weave / ipd(half, 'solo-async'))} solo-async, {x(weave / best)} best baseline, "
            f"{'/'.join(sorted(slo))} within SLO"]


def spot():
    saved, share, vs_spot_only, slo = [], None, [], set()
    for s in SEEDS:
        v = run("sweep", "spot", "--trace", WILD, "--seed", str(s), "--discounts", "60", "--rates", "0.125")
        on_demand, row = v["on_demand"], v["rows"][0]
        per_iteration = lambda r: r["total_cost"] / r["iterations"]
        saved.append(1 - per_iteration(row["weave"]) / per_iteration(on_demand))
        if share is None:
            share = on_demand["rollout"]["cost"] / on_demand["total_cost"]
        vs_spot_only.append(row["weave"]["iterations_per_k_dollars"] / row["spot_only"]["iterations_per_k_dollars"])
        slo.add(pct(row["weave"]["slo_attainment_jobs"]))
    ratios = {f"{r:.1f}x" for r in vs_spot_only}
    return [f"{slashed(saved, lambda v: f'{100 * v:.1f}%')} fewer dollars per iteration than on-demand Weave "
            f"(H20 is {pct(share)} of its bill: 60% off all of it would be {100 * 0.6 * share:.1f}%), "
            f"{'/'.join(sorted(slo))} within SLO, {'/'.join(sorted(ratios))} the spot-only baseline"]


def lending():
    def gains(rows):
        return [r["with_lending"]["iterations_per_k_dollars"] / r["without"]["iterations_per_k_dollars"] - 1
                for r in rows]
    rows = run("sweep", "lending", "--trace", WILD)
    assert [r["seed"] for r in rows] == list(SEEDS), [r["seed"] for r in rows]
    builtin_gain = gains(run("sweep", "lending", "--seeds", "1"))[0]
    slo = {pct(r["with_lending"]["slo_attainment_jobs"]) for r in rows}
    delays = sum(r["with_lending"]["lending"]["lender_delays"] for r in rows)
    return [f"{slashed(gains(rows), lambda v: f'{100 * v:+.2f}%')} iterations per dollar "
            f"(built-in {100 * builtin_gain:+.2f}%), {'/'.join(sorted(slo))} within SLO, {delays} lender delays"]


def agentic_replay(cls, seed, staleness=0):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "t.jsonl")
        gen = [weave, "trace", "generate", "--mode", "agentic", "--class", cls, "--jobs", "200",
               "--seed", str(seed), "--staleness", str(staleness), "-o", t]
        out = subprocess.run(gen, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(gen)} failed: {out.stderr.strip()}")
        return policies(run("simulate", "--trace", t, "--env-nodes", "8"))


def ipd(ps, name):
    return ps[name]["iterations_per_k_dollars"]


def over_best_baseline(ps):
    return ipd(ps, "weave") / max(ipd(ps, n) for n in ("rollart", "colocated", "solo-disagg"))


def agentic():
    mixed = [agentic_replay("mixed", s) for s in (1, 2)]
    swe = [agentic_replay("swe", s) for s in (1, 2)]
    best = [over_best_baseline(ps) for ps in mixed]
    two = lambda runs: [ipd(ps, "weave") / ipd(ps, "weave-two-tier") for ps in runs]
    slo = {pct(ps["weave"]["slo_attainment_jobs"]) for ps in mixed + swe}
    return [f"weave {slashed(best, x)} the best of rollart, colocated and solo-disagg",
            f"{slashed(two(mixed), x)} weave-two-tier, {'/'.join(sorted(slo))} within SLO",
            f"SWE class seeds 1 / 2: {slashed(two(swe), x)} weave-two-tier"]


def agentic_equal_staleness():
    mixed = [agentic_replay("mixed", s, staleness=1) for s in (1, 2)]
    slo = {pct(ps["weave"]["slo_attainment_jobs"]) for ps in mixed}
    return [f"weave {slashed([over_best_baseline(ps) for ps in mixed], x)} the best of rollart, colocated and "
            f"solo-disagg, {'/'.join(sorted(slo))} within SLO"]


def lora():
    import tempfile

    runs = []
    for seed in (1, 2):
        with tempfile.TemporaryDirectory() as d:
            t = os.path.join(d, "t.jsonl")
            gen = [weave, "trace", "generate", "--mode", "lora", "--jobs", "300", "--seed", str(seed), "-o", t]
            out = subprocess.run(gen, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{' '.join(gen)} failed: {out.stderr.strip()}")
            runs.append(policies(run("simulate", "--trace", t, "--policy", "weave,dedicated,colocated")))
    ratio = lambda name: slashed([ipd(ps, "weave") / ipd(ps, name) for ps in runs], x)
    slo = slashed([ps["weave"]["slo_attainment_jobs"] for ps in runs], lambda v: f"{100 * v:.1f}%")
    return [f"weave {ratio('solo-disagg')} dedicated, {ratio('colocated')} colocated, "
            f"{slashed([ipd(ps, 'weave') / ipd(ps, 'weave-full-model') for ps in runs], lambda v: f'{v:.3f}x')} "
            f"weave-full-model, {slo} within SLO"]


ROWS = [
    ("built-in workload, 60 jobs", builtin),
    ("the authors' wild trace, seeds 1 / 2 / 3", wild_rows),
    ("the paper's Weave (disaggregated groups only), wild trace", papers_weave),
    ("prototype mode, wild trace", prototype),
    ("bounded staleness, half the jobs at k = 1", staleness),
    ("spot rollout nodes, 60% off", spot),
    ("lending idle rollout blocks across groups", lending),
    ("agentic jobs (synthetic)", agentic),
    ("agentic jobs at RollArt's staleness", agentic_equal_staleness),
    ("LoRA jobs on shared bases (synthetic)", lora),
]


def main():
    if not os.path.exists(WILD):
        sys.exit(f"check-readme: {WILD} is not present (every CI run has it beside the project)")
    readme = open("README.md").read().splitlines()
    stale = []
    for label, figures in ROWS:
        row = [line for line in readme if line.startswith(f"| {label}")]
        if len(row) != 1:
            stale.append(f"README: {len(row)} table rows start with '| {label}' (expected one)")
            continue
        for expected in figures():
            ok = expected in row[0]
            print(f"{'ok   ' if ok else 'STALE'} {label}: {expected}")
            if not ok:
                stale.append(f"README row '{label}' does not say what the command prints now: {expected}")
    for s in stale:
        print(s)
    print(f"check-readme: {len(ROWS)} rows, {len(stale)} stale")
    sys.exit(1 if stale else 0)


main()
