//! The client against a real Slurm cluster: `scripts/slurm-local.sh`'s (Debian's Slurm and
//! munge, a network namespace per node). Ignored by default; under `--ignored` a missing Slurm,
//! root or namespace fails the test naming what is missing (`.ci/run` installs Slurm first).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use weave_slurm::{JobState, Launch, NodeState, SlurmClient, SlurmError};

const NS: &str = "weave-slurm-client-test";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-local.sh").canonicalize().unwrap()
}

/// The cluster; taken down when the test ends, even by a panic.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = std::env::temp_dir().join(NS);
        let run = |what: &str| {
            Command::new(script()).arg(what).env("WEAVE_SLURM_NETNS", NS).env("WEAVE_SLURM_DIR", &dir).output().unwrap()
        };
        let check = run("check");
        assert!(check.status.success(), "slurm-local.sh check: {}", String::from_utf8_lossy(&check.stderr));
        let _ = run("down");
        let up = run("up");
        assert!(up.status.success(), "slurm-local.sh up: {}", String::from_utf8_lossy(&up.stderr));
        Cluster { dir }
    }

    fn client(&self) -> SlurmClient {
        let conf = format!("SLURM_CONF={}", self.dir.join("slurm.conf").display());
        SlurmClient::new(["ip", "netns", "exec", NS, "env", &conf].map(String::from).to_vec())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ =
            Command::new(script()).arg("down").env("WEAVE_SLURM_NETNS", NS).env("WEAVE_SLURM_DIR", &self.dir).status();
    }
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "needs Slurm and munge (apt-get install slurmctld slurmd slurm-client munge), root and network namespaces: .ci/run runs it with --ignored"]
fn jobs_launch_pinned_bad_launches_carry_slurms_message_and_node_states_read_back() {
    let cluster = Cluster::up();
    let slurm = cluster.client();
    let nodes = slurm.nodes().unwrap();
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["r0", "r1", "t0"]);
    assert!(nodes.iter().all(|n| n.state == NodeState::Up), "{nodes:?}");

    // Pinned to r0, with an environment value holding a comma.
    let out = cluster.dir.join("pinned.out");
    let pinned = ["r0".to_string()];
    let env = [("WEAVE_TEST_VALUE".to_string(), "a,b".to_string())];
    let launch = Launch {
        name: "weave-test-a-0",
        nodes: &pinned,
        env: &env,
        command: "echo \"$SLURMD_NODENAME $WEAVE_TEST_VALUE\"; sleep 60",
        output: Some(&out),
    };
    let id = slurm.submit(&launch).unwrap();
    let job = wait_for("the pinned job running", || {
        slurm.jobs().unwrap().into_iter().find(|j| j.id == id && j.state == JobState::Running)
    });
    assert_eq!((job.name.as_str(), job.nodes.as_str()), ("weave-test-a-0", "r0"));
    wait_for("its output", || std::fs::read_to_string(&out).ok().filter(|s| !s.is_empty()));
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "r0 a,b");

    // What Slurm refuses comes back with Slurm's message.
    let unknown = ["r9".to_string()];
    let e = slurm.submit(&Launch { nodes: &unknown, ..launch.clone() }).unwrap_err();
    assert!(
        matches!(&e, SlurmError::Failed { program, message, .. } if program == "sbatch" && message.to_lowercase().contains("node")),
        "{e}"
    );
    let e = slurm.clone().with_partition("nope").submit(&launch).unwrap_err();
    assert!(matches!(&e, SlurmError::Failed { message, .. } if message.to_lowercase().contains("partition")), "{e}");

    // Cancelled by name; a node an operator sets down reads back down with the reason.
    slurm.cancel("weave-test-a-0").unwrap();
    wait_for("the job cancelled", || {
        let j = slurm.jobs().unwrap().into_iter().find(|j| j.id == id);
        j.is_none_or(|j| matches!(j.state, JobState::Ended(_))).then_some(())
    });
    let status = Command::new(script())
        .args(["exec", "scontrol", "update", "nodename=r1", "state=down", "reason=weave-test"])
        .env("WEAVE_SLURM_NETNS", NS)
        .env("WEAVE_SLURM_DIR", &cluster.dir)
        .status()
        .unwrap();
    assert!(status.success());
    let r1 = wait_for("r1 down", || {
        slurm.nodes().unwrap().into_iter().find(|n| n.name == "r1" && n.state == NodeState::Down)
    });
    assert_eq!(r1.reason, "weave-test");
}
