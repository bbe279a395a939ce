"""End to end, `weave serve --lending` with real drivers: a lender job (``examples/bandit.py``,
training steps of 14 s) and a borrower (the same toy job with 128 prompts of 0.25 s on one
rollout node), each in a group of its own (allowed no slowdown). The borrower's rollout starts
while the lender trains: its grant lends it the lender's rollout node until shortly before the
lender's training should end. The borrower's driver starts a worker there once loaded, moves
that worker's prompts back by the deadline, and returns the loan; the lender's next rollout
is granted as it would have been.

The event log must show the loan made and returned by the driver (not ended by the rollout's
finish), how late the return came (printed: the acceptance's figure), the lent node producing
part of the rollout, every prompt consumed exactly once, and both jobs completing every
iteration. A second pair runs with a lender that declared twice the training it takes: its next
rollout is granted the moment its training ends, which brings the loan's deadline to then, and
the borrower hears that in a heartbeat's answer and gives the node back.

Run by `crates/weave-cli/tests/serve_process.rs`; exit code 0 on success.
"""

import argparse
import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weave_client import WeaveClient  # noqa: E402
from server_process import Server, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BANDIT = os.path.join(HERE, "..", "examples", "bandit.py")
PROMPTS, PROMPT_S, TRAIN_S = 128, 0.25, 14.0


def spec(job, rollout_s, train_s, iterations):
    # Allowed no slowdown, so each runs in a group of its own; switches as the toy job takes
    # them (the lender's warm wake, 1 s, is its margin before its next rollout).
    return {"id": job, "type": "7B_8k", "iterations": iterations, "slo": 1.0, "rollout_s": rollout_s,
            "train_s": train_s, "switch_warm_s": 1.0, "switch_cold_s": 2.0, "sync_s": 0.0}


def driver(url, token, job, iterations, *extra):
    cmd = [sys.executable, BANDIT, "--server", url, "--token", token, "--job", job, "--no-submit",
           "--iterations", str(iterations), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def scenario(url, token, ops, tag, declared_train_s, procs):
    """A lender (declaring ``declared_train_s`` of training, taking ``TRAIN_S``) and a borrower
    whose rollout starts while the lender trains; returns what happened to the loan."""
    lender, borrower = f"lender{tag}", f"borrower{tag}"
    ops.submit(spec(lender, 1.0, declared_train_s, 2))
    procs.append(driver(url, token, lender, 2, "--train-wall-s", str(TRAIN_S)))

    def lender_trains():
        return any(e["kind"] == "grant" and e["job"] == lender and e.get("phase") == "train" for e in ops.events())

    wait_for("the lender's first training", lender_trains, 60, 0.05)
    ops.submit(spec(borrower, PROMPTS * PROMPT_S, 1.0, 1))
    procs.append(driver(url, token, borrower, 1, "--prompts", str(PROMPTS), "--prompt-s", str(PROMPT_S)))
    outs = []
    for p in procs[-2:]:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, f"a driver failed:\n{out}\n{err}"
        outs.append(out.strip())
    print("\n".join(outs), flush=True)

    events = [e for e in ops.events() if e["job"] in (lender, borrower)]
    views = {j: ops.job(j)["job"] for j in (lender, borrower)}
    assert all(v["state"] == "completed" for v in views.values()), views
    assert views[lender]["group"] != views[borrower]["group"], views
    loans = [e for e in events if e["kind"] == "loan"]
    assert len(loans) == 1 and loans[0]["job"] == borrower, loans
    lent = loans[0]["meta"]["nodes"]
    assert lent == views[lender]["rollout_nodes"], (lent, views[lender])
    returned = [e for e in events if e["kind"] == "loan-returned"]
    assert len(returned) == 1 and returned[0]["meta"]["reason"] == "returned by its driver", returned
    rollout = next(e["meta"] for e in events if e["job"] == borrower and e["kind"] == "finish"
                   and e["phase"] == "rollout")
    assert rollout["lent"] == lent, rollout
    assert sum(rollout["produced_by"].get(n, 0) for n in lent) > 0, f"the lent node produced nothing: {rollout}"
    assert sum(rollout["produced_by"].values()) == PROMPTS, rollout
    assert lent[0] in rollout["left"], rollout
    consumed = next(e["meta"]["consumed_prompts"] for e in events if e["job"] == borrower
                    and e["kind"] == "finish" and e["phase"] == "train")
    assert consumed == list(range(PROMPTS)), consumed
    lender_rollout = next(e for e in events if e["job"] == lender and e["kind"] == "grant"
                          and e.get("phase") == "rollout" and e.get("iteration") == 1)
    reclaimed = [e for e in events if e["kind"] == "loan-reclaimed"]
    return {"lent": lent, "rollout": rollout, "loan": loans[0], "returned": returned[0], "reclaimed": reclaimed,
            "lender_rollout": lender_rollout}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve-cmd", required=True)
    ap.add_argument("--admin", required=True)
    args = ap.parse_args()
    server = Server(args.serve_cmd)
    url = server.start()
    procs = []
    try:
        ops = WeaveClient(url, args.admin)
        # 1. The lender trains as long as it declared: the deadline holds and the driver gives
        # the node back by it.
        r = scenario(url, args.admin, ops, "", TRAIN_S, procs)
        assert not r["reclaimed"], r["reclaimed"]
        late_s = r["returned"]["meta"]["late_s"]
        head = (r["lender_rollout"]["time_us"] - r["returned"]["time_us"]) / 1e6
        window = (r["loan"]["meta"]["deadline_us"] - r["loan"]["meta"]["from_us"]) / 1e6
        ro = r["rollout"]
        print(f"ok: {r['lent']} lent to the borrower for {window:.1f} s (load to deadline), produced "
              f"{ro['produced_by']}, {ro['moved']} prompts moved ({ro['restarted']} started over); "
              f"returned {late_s:+.3f} s after the deadline (the driver measured {ro.get('returned_late_s')} s), "
              f"{head:.2f} s before the lender's next rollout was granted; every prompt consumed once", flush=True)
        # 2. The lender declared twice the training it takes: its next rollout is granted when
        # its training ends, on the lent node, which brings the deadline to then; the borrower
        # hears it in a heartbeat's answer and gives the node back.
        r = scenario(url, args.admin, ops, "-early", 2 * TRAIN_S, procs)
        assert len(r["reclaimed"]) == 1 and r["reclaimed"][0]["meta"]["reason"] == "the lender's rollout", r["reclaimed"]
        assert r["reclaimed"][0]["time_us"] == r["lender_rollout"]["time_us"], "the lender's grant was not held"
        late_s = r["returned"]["meta"]["late_s"]
        ro = r["rollout"]
        print(f"ok: the lender's training ended {TRAIN_S:.0f} s before its estimate: its rollout was granted at once, "
              f"and the borrower, told in a heartbeat (every 0.5 s), gave {r['lent']} back {late_s:+.3f} s after; "
              f"produced {ro['produced_by']}; every prompt consumed once", flush=True)
        # The operator's view: /metrics counts the loans, the early reclaim and the returns.
        req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {args.admin}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            metrics = resp.read().decode()
        for line in ("weave_loans_total 2", "weave_loans_reclaimed_early_total 1", "weave_loans_out 0",
                     "weave_loan_return_late_seconds_count 2"):
            assert line in metrics.splitlines(), f"/metrics lacks {line!r}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


if __name__ == "__main__":
    main()
