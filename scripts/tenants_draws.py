"""Summarises `weave experiment tenants --json` runs (one file per seed): the last mode
(quotas+preemption+backfill) against the first (fifo) on the same jobs."""

import json
import statistics as st
import sys


def spread(diffs):
    """Mean, its standard error (the draws are independent) and the range."""
    se = st.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    return f"{st.mean(diffs):+.2f} ± {se:.2f} ({min(diffs):+.2f} to {max(diffs):+.2f})"


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    fifo, mode = [r[0] for r in runs], [r[-1] for r in runs]
    useful = [(b["training_useful_share"] - f["training_useful_share"]) * 100 for b, f in zip(mode, fifo)]
    busy = [(b["training_busy_share"] - f["training_busy_share"]) * 100 for b, f in zip(mode, fifo)]
    below = sum(t["longest_below_entitlement_h"] > 10 / 60 + 1e-9 for b in mode for t in b["tenants"])
    tenants = sum(len(b["tenants"]) for b in mode)
    mean = lambda rows, k: st.mean(r[k] for r in rows)  # noqa: E731
    total = lambda rows, k: sum(r[k] for r in rows)  # noqa: E731
    print(f"draws: {len(runs)}, mode {mode[0]['mode']} against {fifo[0]['mode']}")
    print(f"tenants below 95% of entitlement > 10 min while waiting: {below} of {tenants}")
    print(f"high jobs over their bound: {total(mode, 'high_over_bound')} of {total(mode, 'high_jobs')}"
          f" (passed over {total(mode, 'high_passed_over')})")
    print(f"training busy minus FIFO's: {spread(busy)} pt, below FIFO on {sum(d < 0 for d in busy)}")
    print(f"useful training minus FIFO's: {spread(useful)} pt, below FIFO on {sum(d < 0 for d in useful)}")
    print(f"jobs within SLO: {mean(mode, 'slo_met_jobs') * 100:.2f}% (min {min(r['slo_met_jobs'] for r in mode) * 100:.1f}%)"
          f" vs FIFO {mean(fifo, 'slo_met_jobs') * 100:.2f}%")
    cause = [sum(r["slo_missed_by_cause"][k] for r in mode) for k in range(3)]
    print(f"missed SLO: reclaimed / outranked / never preempted: {cause[0]} / {cause[1]} / {cause[2]}")
    print(f"preemptions per run: {mean(mode, 'preemptions'):.1f}, saved at iteration end"
          f" {st.mean(r.get('preemptions_saved', 0) for r in mode):.1f}, lost iterations per run"
          f" {mean(mode, 'lost_iterations'):.1f}")
    print(f"mean first-start delay: {mean(mode, 'delay_mean_h'):.2f} h vs FIFO {mean(fifo, 'delay_mean_h'):.2f} h")
    per_k = [b["iterations_per_k_dollars"] - f["iterations_per_k_dollars"] for b, f in zip(mode, fifo)]
    print(f"iterations per $1k: {mean(mode, 'iterations_per_k_dollars'):.1f}"
          f" vs FIFO {mean(fifo, 'iterations_per_k_dollars'):.1f} (difference {spread(per_k)}, below on"
          f" {sum(d < 0 for d in per_k)})")
    promise = [r["backfill_promise"] for r in mode if r.get("backfill_promise")]
    if promise:
        print("backfilled starts; blocked jobs gone past; started after their projection (> 1 h): "
              f"{sum(p['backfilled'] for p in promise)}; {sum(p['jumped'] for p in promise)}; "
              f"{sum(p['late'] for p in promise)} ({sum(p['late_over_1h'] for p in promise)})")


if __name__ == "__main__":
    main(sys.argv[1:])
