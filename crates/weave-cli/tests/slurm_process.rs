//! The Slurm backend end to end: a local Slurm cluster (`scripts/slurm-local.sh`: munge,
//! slurmctld and one slurmd per node, each node a network namespace on its own CPU set, the
//! inter-pool link shaped) with `weave serve --backend slurm` in its switch's namespace; two
//! reference GRPO jobs (PyTorch) placed by Weave and launched as Slurm batch jobs pinned to
//! their nodes, their trainer and rollout worker started as job steps on the nodes of their
//! phases (`weave_client.runtime.slurm_grpo`); `weave serve` and slurmctld restarted mid-run;
//! the jobs' rollout node set DOWN in Slurm mid-run, each job resuming from exactly Weave's
//! count; the jobs' training node drained in Slurm while they run, read by Weave as a
//! preemption notice; and a launch Slurm refuses failing its job with Slurm's message. The checks live in
//! `python/tests/check_slurm_grpo.py`. Ignored by default; under `--ignored` a missing Slurm,
//! root, namespace or torch fails the test naming what is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use weave_testkit::LocalCluster;

const TOKEN: &str = "slurm-e2e-token";
const LINK_MBIT: u32 = 100;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The command line of `slurm-local.sh` with the cluster's settings, for the checker to run.
fn script_cmd(cluster: &LocalCluster, args: &str) -> String {
    let env: Vec<String> = cluster.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("env {} {} {args}", env.join(" "), cluster.script.display())
}

#[test]
#[ignore = "needs Slurm and munge, root, network namespaces and torch in WEAVE_TORCH_PYTHON: .ci/run runs it with --ignored"]
fn real_grpo_jobs_run_on_slurm_and_survive_restarts_and_a_downed_node() {
    let python = std::env::var_os("WEAVE_TORCH_PYTHON").map(PathBuf::from);
    let test = "real_grpo_jobs_run_on_slurm_and_survive_restarts_and_a_downed_node";
    weave_testkit::require(test, python.is_some(), "WEAVE_TORCH_PYTHON is not set (a Python with ./python[torch])");
    let python = python.expect("checked");
    let script = root().join("scripts/slurm-local.sh");
    let id = std::process::id();
    let state = std::env::temp_dir().join(format!("weave-slurm-e2e-{id}"));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(state.join("checkpoints")).unwrap();
    std::fs::create_dir_all(state.join("out")).unwrap();
    let env = vec![
        ("WEAVE_SLURM_NETNS".to_string(), format!("wse{id}")),
        ("WEAVE_SLURM_DIR".to_string(), state.join("slurm").display().to_string()),
        ("WEAVE_SLURM_LINK_MBIT".to_string(), LINK_MBIT.to_string()),
    ];
    let cluster = LocalCluster { script, env };
    let check = cluster.cmd(&["check"]).output().unwrap();
    weave_testkit::require(test, check.status.code() != Some(77), String::from_utf8_lossy(&check.stderr).trim());
    assert!(check.status.success(), "slurm-local.sh check: {}", String::from_utf8_lossy(&check.stderr));
    assert!(cluster.cmd(&["up"]).status().unwrap().success(), "the Slurm cluster did not come up");
    let serve_ip = String::from_utf8(cluster.cmd(&["serve-ip"]).output().unwrap().stdout).unwrap().trim().to_string();

    let hash = Command::new(env!("CARGO_BIN_EXE_weave")).args(["token", "hash", TOKEN]).output().unwrap();
    let tenants = format!(
        "[[tenant]]\nname = \"team\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
        String::from_utf8_lossy(&hash.stdout).trim()
    );
    std::fs::write(state.join("tenants.toml"), tenants).unwrap();
    let serve = |port: u16, data: &str, extra: &str| {
        format!(
            "{} serve --backend slurm --addr {serve_ip}:{port} --tenants {} --data {} --slurm-output {}{extra}",
            env!("CARGO_BIN_EXE_weave"),
            state.join("tenants.toml").display(),
            state.join(data).display(),
            state.join("out").display()
        )
    };
    let mut checker = cluster.cmd(&["exec"]);
    checker
        .arg(&python)
        .arg(root().join("python/tests/check_slurm_grpo.py"))
        .args(["--serve-cmd", &serve(7070, "data", ""), "--token", TOKEN])
        .args(["--refused-serve-cmd", &serve(7071, "refused", " --slurm-partition no-such-partition")])
        .arg("--checkpoints")
        .arg(state.join("checkpoints"))
        .arg("--slurm-output")
        .arg(state.join("out"))
        .arg("--python")
        .arg(&python)
        .args(["--iterations", "60", "--kill-after", "3"])
        .args(["--kill", "scontrol update nodename={node} state=down reason=weave-e2e"])
        .arg("--drain")
        .args(["--restart-controller", &script_cmd(&cluster, "restart-controller")]);
    let out = checker.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "check_slurm_grpo.py failed");
    let m: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("JSON last");
    assert!(m["resumed_from"].as_object().is_some_and(|r| !r.is_empty()), "no job was re-admitted: {m}");
    assert!(m["refused"].as_str().is_some_and(|r| r.contains("Invalid partition")), "{m}");
    assert!(m["drain"].as_str().is_some_and(|r| r.contains("weave-e2e-drain")), "no notice from the drain: {m}");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&state);
}
