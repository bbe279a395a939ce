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
    let err = stderr(&weave(&["sweep", "lending", "--seeds", "x"]));
    assert!(err.contains("--seeds"), "{err}");
}
