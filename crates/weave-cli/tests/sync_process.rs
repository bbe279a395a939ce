//! The transfer engine between real processes on loopback: a multi-shard model, a connection
//! killed mid-transfer, and still a verified, complete, atomically published version on every
//! receiver.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use weave_model::syncplan::{plan, Topology};
use weave_model::SyncPlanKind;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weave-sync-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Kill(Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start(args: &[String]) -> (Child, String, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weave"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("`{line}`")).to_string();
    (c, addr, out)
}

fn model(d: &Path, bytes: usize) -> PathBuf {
    let p = d.join("model.bin");
    let data: Vec<u8> = (0..bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&p, data).unwrap();
    p
}

/// Runs a 3 -> 3 sync of `kind` with `fault` on training GPU 0's server; returns the summed
/// reconnects and checksum retries of the receivers, each of which must publish the exact model.
fn run(kind: SyncPlanKind, name: &str, fault: [&str; 2]) -> (u64, u64) {
    let d = dir(name);
    let bytes = 24_000_003u64;
    let src = model(&d, bytes as usize);
    let (n, m) = (3u32, 3u32);
    let mut kill = Kill(Vec::new());
    let mut train = Vec::new();
    for i in 0..n {
        let mut a = vec!["sync".to_string(), "send".into(), "--model-file".into(), src.display().to_string()];
        if i == 0 {
            a.extend(fault.map(String::from));
        }
        let (c, addr, _) = start(&a);
        kill.0.push(c);
        train.push(addr.parse().unwrap());
    }
    let manifest = d.join("manifest.json");
    let mut rollout = Vec::new();
    let mut outs = Vec::new();
    for j in 0..m {
        let a: Vec<String> = [
            "sync",
            "receive",
            "--manifest",
            &manifest.display().to_string(),
            "--me",
            &j.to_string(),
            "--out",
            &d.join(format!("r{j}")).display().to_string(),
            "--linger-s",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (c, addr, out) = start(&a);
        kill.0.push(c);
        rollout.push(addr.parse().unwrap());
        outs.push(out);
    }
    let topo = Topology {
        train_gpus: n,
        rollout_gpus: m,
        gpus_per_node: 8,
        slow_stream_bps: 1e9,
        slow_aggregate_bps: f64::INFINITY,
        fast_bps: 1e10,
        latency: weave_core::Micros(0),
    };
    // Senders serve version 1 (their default).
    let m_ = weave_sync::Manifest::build(1, plan(kind, bytes, &topo), &src, train, rollout).unwrap();
    let tmp = d.join("manifest.tmp");
    std::fs::write(&tmp, serde_json::to_string(&m_).unwrap()).unwrap();
    std::fs::rename(&tmp, &manifest).unwrap();
    let want = weave_sync::sha256_range(&src, 0, bytes).unwrap();
    let (mut reconnects, mut retries) = (0, 0);
    for (j, mut out) in outs.into_iter().enumerate() {
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(rest.lines().next().unwrap_or_else(|| panic!("receiver {j} said nothing"))).unwrap();
        reconnects += v["stats"]["reconnects"].as_u64().unwrap();
        retries += v["stats"]["checksum_retries"].as_u64().unwrap();
        let dir_j = d.join(format!("r{j}"));
        let current = weave_sync::current(&dir_j).expect("a published version");
        assert_eq!(current, dir_j.join("v1.bin"));
        assert_eq!(weave_sync::sha256_range(&current, 0, bytes).unwrap(), want, "receiver {j} has the exact model");
        assert!(!dir_j.join("v1.partial").exists(), "staging removed after publishing");
    }
    (reconnects, retries)
}

const DROP: [&str; 2] = ["--fail-after-bytes", "3000000"];
const CORRUPT: [&str; 2] = ["--corrupt-after-bytes", "3000000"];

#[test]
fn topology_aware_plan_survives_a_dropped_connection() {
    let (reconnects, _) = run(SyncPlanKind::TopologyAware, "topo", DROP);
    assert!(reconnects >= 1, "the dropped connection was retried ({reconnects} reconnects)");
}

#[test]
fn flat_plan_survives_a_dropped_connection() {
    let (reconnects, _) = run(SyncPlanKind::Flat, "flat", DROP);
    assert!(reconnects >= 1, "the dropped connection was retried ({reconnects} reconnects)");
}

/// A flipped byte fails its piece's checksum: the piece is fetched again, nothing damaged is
/// forwarded to peers or published.
#[test]
fn a_corrupted_piece_is_fetched_again_and_never_published() {
    for kind in [SyncPlanKind::TopologyAware, SyncPlanKind::Flat] {
        let (_, retries) = run(kind, &format!("corrupt-{kind:?}"), CORRUPT);
        assert_eq!(retries, 1, "{kind:?}: exactly the damaged piece was refused once");
    }
}

#[test]
fn publishing_refuses_an_incomplete_version() {
    let d = dir("refuse");
    let staging = weave_sync::Staging::create(&d, 3, 1000).unwrap();
    staging.verified.lock().unwrap().push((0, 600));
    assert!(weave_sync::publish(&staging, &d, 1000).is_err());
    assert!(weave_sync::current(&d).is_none(), "nothing published");
}

/// The namespace experiment: topology-aware sync beats flat on real links, as the README
/// claims. Four training GPUs send 64 MB to four rollout GPUs over a slow link shaped to
/// 400 Mbit/s per NIC (each GPU its own namespace). Flat sends every rollout GPU its own copy
/// over the slow link; the topology-aware plan crosses it once per byte and fans out on the
/// fast rollout fabric, so its transfer part is 4x faster (the planner's figure, checked
/// exactly). Measured, connection set-up and publishing are a larger share of the shorter run,
/// and they take CPU where the transfer takes the link: at 16 MB a CI run beside a soak on two
/// cores measured 2.37x (3.48x on a quiet machine), at 64 MB beside the same load 3.1x, and a
/// CI run on 2026-12-06 2.48x (the README's 3.95x is at 128 MB, from `weave sync bench`). How
/// much faster is the benchmark's figure, not this test's: a timing threshold near what a
/// loaded machine measures fails by chance. The test asks that the order holds with a margin
/// (at least 1.5x: the plan did not fall back to flat's traffic).
#[test]
#[ignore = "needs root and iproute2 for network namespaces: .ci/run runs it with --ignored"]
fn topology_aware_sync_beats_flat_across_namespaces() {
    let test = "topology_aware_sync_beats_flat_across_namespaces";
    weave_testkit::require(test, weave_testkit::is_root(), "root, for network namespaces");
    let o = Command::new(env!("CARGO_BIN_EXE_weave"))
        .args(["sync", "bench", "--size-mb", "64", "--train", "4", "--rollout", "4", "--json"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    weave_testkit::require(test, !out.starts_with("skipped:"), &out);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let plans = v["plans"].as_array().expect("plans");
    assert_eq!(plans.len(), 2, "{v}");
    for p in plans {
        assert!(p["measured_s"].as_f64().is_some_and(|s| s > 0.0), "{p}");
    }
    let r = &v["flat_over_topology_aware"][0];
    let (measured, transfer) = (r["measured"].as_f64().unwrap(), r["transfer_predicted"].as_f64().unwrap());
    assert!((transfer - 4.0).abs() < 0.05, "four receivers: flat moves 4x the bytes over the slow link: {v}");
    assert!(measured >= 1.5, "topology-aware only {measured:.2}x faster than flat (at least 1.5x expected): {v}");
    eprintln!("{out}");
}

/// `weave sync plan --emit` prints the plan a job's sync runs (the Python runtime reads it):
/// for a real job's bytes and ranks, its shards, forwards and prediction; bad shapes are refused.
#[test]
fn a_plan_is_emitted_for_a_jobs_bytes_and_ranks() {
    let weave = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_weave")).args(args).output().unwrap();
    let shape = ["sync", "plan", "--model-bytes", "1001", "--train-gpus", "2", "--rollout-gpus", "2"];
    let out = weave(&[&shape[..], &["--gpus-per-node", "2", "--emit", "topology-aware"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let transfers = v["plan"]["transfers"].as_array().unwrap();
    let slow: u64 = transfers.iter().filter(|t| t["tier"] == "slow").map(|t| t["len"].as_u64().unwrap()).sum();
    assert_eq!((transfers.len(), slow, v["plan"]["model_bytes"].as_u64()), (4, 1001, Some(1001)), "{v}");
    assert!(v["transfer_predicted_s"].as_f64().unwrap() < v["predicted_s"].as_f64().unwrap(), "{v}");
    // A flat plan to two one-GPU nodes sends the model across twice.
    let out = weave(&[&shape[..], &["--gpus-per-node", "1", "--emit", "flat"]].concat());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let slow: u64 = v["plan"]["transfers"].as_array().unwrap().iter().map(|t| t["len"].as_u64().unwrap()).sum();
    assert_eq!(slow, 2002, "{v}");
    for bad in [["--model-bytes", "0"], ["--gpus-per-node", "0"]] {
        let out = weave(&[&["sync", "plan", "--emit", "flat"][..], &bad[..]].concat());
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(bad[0]), "{}", String::from_utf8_lossy(&out.stderr));
    }
}
