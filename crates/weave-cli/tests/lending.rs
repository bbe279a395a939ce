//! Lending from the command line: `simulate --lending` shows what the loans did, and `weave
//! sweep lending` compares Weave with and without it per seed.

mod common;

use common::{stderr, stdout, weave};

#[test]
fn simulate_shows_the_loans_and_the_sweep_compares_per_seed() {
    let o = weave(&["simulate", "--policy", "weave,solo-disagg", "--lending"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("lender delays") && out.contains("rollout h saved"), "{out}");
    // Only Weave lends: the lending table has one row.
    let table: Vec<&str> = out.lines().skip_while(|l| !l.contains("lender delays")).collect();
    assert!(table.iter().any(|l| l.contains("│ weave")), "{out}");
    assert!(!table.iter().any(|l| l.contains("solo-disagg")), "{out}");
    let plain = stdout(&weave(&["simulate", "--policy", "weave"]));
    assert!(!plain.contains("lender delays"), "lending is off unless asked for");

    let o = weave(&["sweep", "lending", "--seeds", "1,2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("with lending") && out.lines().filter(|l| l.contains("100.0% / 100.0%")).count() == 2,
        "{out}"
    );
    // The same sweep as JSON, checked for what it claims per seed: loans made, no lender
    // delayed, every job within its SLO on both sides, the same work done with and without,
    // and the lent GPU-hours charged in the money split as the lending report counts them.
    let o = weave(&["sweep", "lending", "--seeds", "1,2", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(2), "{rows}");
    for r in rows.as_array().unwrap() {
        let (off, on) = (&r["without"], &r["with_lending"]);
        let l = &on["lending"];
        assert!(l["loans"].as_u64().unwrap() > 0 && l["lender_delays"] == 0, "seed {}: {l}", r["seed"]);
        assert!(off["lending"].is_null(), "lending off reports none");
        assert_eq!((off["slo_attainment_jobs"].as_f64(), on["slo_attainment_jobs"].as_f64()), (Some(1.0), Some(1.0)));
        assert_eq!(off["iterations"], on["iterations"], "equal work");
        let lent = on["money"]["lent"]["gpu_hours"].as_f64().unwrap();
        assert!((lent - l["lent_gpu_hours"].as_f64().unwrap()).abs() < 1e-9, "{lent} vs {l}");
    }
    let err = stderr(&weave(&["sweep", "lending", "--seeds", "x"]));
    assert!(err.contains("--seeds"), "{err}");
}
