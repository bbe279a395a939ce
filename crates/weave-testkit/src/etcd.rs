//! Local etcd clusters for the tests of the replicated log and the replicated server: members
//! on free ports in a temporary directory, each a process the test may kill and run again.

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

/// A local etcd cluster; its members are killed when it is dropped.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial: String,
    token: String,
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("an address").port()
}

impl EtcdCluster {
    /// `n` members for `test`, started, their client ports open. Fails `test` naming the
    /// missing binary if `etcd` is not installed (Debian: `etcd-server`).
    pub fn start(test: &str, n: usize) -> EtcdCluster {
        let found = Command::new("etcd").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        crate::require(test, found, "the etcd binary (Debian: apt-get install etcd-server)");
        let root = std::env::temp_dir().join(format!("weave-etcd-{}-{test}", std::process::id()));
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
        let mut c = EtcdCluster { members, initial, token: format!("weave-{test}") };
        for i in 0..n {
            c.run(i);
        }
        for m in &c.members {
            let addr = m.client.trim_start_matches("http://").to_string();
            let end = Instant::now() + Duration::from_secs(60);
            while std::net::TcpStream::connect(&addr).is_err() {
                assert!(Instant::now() < end, "etcd member {} never listened on {addr}", m.name);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        c
    }

    /// Runs member `i` (again, on its data, after [`EtcdCluster::kill`]).
    pub fn run(&mut self, i: usize) {
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
            .expect("etcd starts");
        self.members[i].child = Some(child);
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

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
