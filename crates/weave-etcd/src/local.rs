//! Local etcd clusters (the `etcd` binary: Debian's `etcd-server`): members on free ports in a
//! temporary directory, each a process its owner may kill and run again. What the tests of the
//! replicated log and `weave bench failover` run against.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Member {
    name: String,
    client: String,
    peer: String,
    dir: PathBuf,
    child: Option<Child>,
}

/// A local etcd cluster; its members are killed and their data removed when it is dropped
/// (each member preallocates about 120 MB: a run of tests would otherwise fill the disk).
pub struct LocalCluster {
    members: Vec<Member>,
    initial: String,
    token: String,
    root: PathBuf,
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

impl LocalCluster {
    /// Whether the `etcd` binary is installed.
    pub fn installed() -> bool {
        Command::new("etcd").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success())
    }

    /// `n` members named for `name`, started, their client ports open.
    pub fn start(name: &str, n: usize) -> Result<LocalCluster, String> {
        if !Self::installed() {
            return Err("the etcd binary is not installed (Debian: apt-get install etcd-server)".into());
        }
        let root = std::env::temp_dir().join(format!("weave-etcd-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("http://127.0.0.1:{}", port()),
                peer: format!("http://127.0.0.1:{}", port()),
                dir: root.join(format!("m{i}")),
                child: None,
            })
            .collect();
        let initial = members.iter().map(|m| format!("{}={}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut c = LocalCluster { members, initial, token: format!("weave-{name}"), root };
        for i in 0..n {
            c.run(i)?;
        }
        for m in &c.members {
            let addr = m.client.trim_start_matches("http://").to_string();
            let end = Instant::now() + Duration::from_secs(60);
            while std::net::TcpStream::connect(&addr).is_err() {
                if Instant::now() > end {
                    return Err(format!("etcd member {} never listened on {addr}", m.name));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(c)
    }

    /// Runs member `i` (again, on its data, after [`LocalCluster::kill`]).
    pub fn run(&mut self, i: usize) -> Result<(), String> {
        let m = &self.members[i];
        let child = Command::new("etcd")
            .args(["--name", &m.name, "--data-dir", &m.dir.display().to_string()])
            .args(["--listen-client-urls", &m.client, "--advertise-client-urls", &m.client])
            .args(["--listen-peer-urls", &m.peer, "--initial-advertise-peer-urls", &m.peer])
            .args(["--initial-cluster", &self.initial, "--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("etcd did not start: {e}"))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Kills member `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
