//! The emulated mini cluster the sync benchmark runs on: one network namespace per GPU, each
//! with its own NIC on the slow inter-pool link, and each rollout GPU with a second port on
//! the rollout pool's fast fabric. Both links are switches (bridges in a namespace of their
//! own) whose every port is rate-limited in both directions (`tc tbf` on the GPU's side
//! limits what it sends, on the switch's side what it receives). This is the topology the
//! planner's prediction assumes: a stream per NIC pair on the slow link, the fabric's rate
//! per GPU, not one rate shared by all of them. Every GPU has one address; host routes send
//! rollout-to-rollout traffic over the fabric and everything else over the slow link.

use anyhow::{bail, Context, Result};
use std::process::Command;

const SWITCH_NS: &str = "wv-sw";
const SLOW_BRIDGE: &str = "wv-slow";
const FAST_BRIDGE: &str = "wv-fast";
/// Endpoints per side the address plan has room for.
pub const MAX_GPUS: u32 = 64;

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output().with_context(|| format!("cannot run {}", args[0]))?;
    if !out.status.success() {
        bail!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Namespaces and links, removed again on drop.
pub struct Fabric {
    namespaces: Vec<String>,
}

pub fn train_ns(i: u32) -> String {
    format!("wv-t{i}")
}

pub fn rollout_ns(j: u32) -> String {
    format!("wv-r{j}")
}

/// Training GPU `i`'s address on the slow link.
pub fn train_ip(i: u32) -> String {
    format!("10.213.0.{}", 10 + i)
}

/// Rollout GPU `j`'s address: on its slow-link NIC, but its peers reach it over the fabric
/// (host routes), so which link carries a transfer follows from who talks to whom.
pub fn rollout_ip(j: u32) -> String {
    format!("10.213.0.{}", 100 + j)
}

/// The NIC whose address a GPU's processes bind to (gloo needs its name).
pub fn nic(train: bool, k: u32) -> String {
    if train {
        format!("t{k}s")
    } else {
        format!("r{k}s")
    }
}

fn shape(ns: &str, dev: &str, mbit: u64) -> Result<()> {
    // A burst of at least 10 ms at the rate (tbf needs rate / HZ), a deep queue.
    let burst_kb = (mbit * 1000 / 8 / 100).max(256);
    sh(&[
        "ip",
        "netns",
        "exec",
        ns,
        "tc",
        "qdisc",
        "add",
        "dev",
        dev,
        "root",
        "tbf",
        "rate",
        &format!("{mbit}mbit"),
        "burst",
        &format!("{burst_kb}kb"),
        "latency",
        "100ms",
    ])
}

impl Fabric {
    pub fn up(train: u32, rollout: u32, slow_mbit: u64, fast_mbit: u64) -> Result<Fabric> {
        if train > MAX_GPUS || rollout > MAX_GPUS {
            bail!("at most {MAX_GPUS} GPUs per side");
        }
        let names: Vec<String> = std::iter::once(SWITCH_NS.to_string())
            .chain((0..train).map(train_ns))
            .chain((0..rollout).map(rollout_ns))
            .collect();
        let fabric = Fabric { namespaces: names.clone() };
        fabric.down();
        for ns in &names {
            sh(&["ip", "netns", "add", ns])?;
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        for br in [SLOW_BRIDGE, FAST_BRIDGE] {
            sh(&["ip", "-n", SWITCH_NS, "link", "add", br, "type", "bridge"])?;
            sh(&["ip", "-n", SWITCH_NS, "link", "set", br, "up"])?;
        }
        for i in 0..train {
            fabric.port(&train_ns(i), &nic(true, i), SLOW_BRIDGE, Some(&train_ip(i)), slow_mbit)?;
        }
        for j in 0..rollout {
            let ns = rollout_ns(j);
            fabric.port(&ns, &nic(false, j), SLOW_BRIDGE, Some(&rollout_ip(j)), slow_mbit)?;
            let fast = format!("r{j}f");
            fabric.port(&ns, &fast, FAST_BRIDGE, None, fast_mbit)?;
            for k in (0..rollout).filter(|k| *k != j) {
                sh(&["ip", "-n", &ns, "route", "add", &format!("{}/32", rollout_ip(k)), "dev", &fast])?;
            }
        }
        Ok(fabric)
    }

    /// A GPU's NIC `name` in `ns`, plugged into `bridge`, shaped both ways.
    fn port(&self, ns: &str, name: &str, bridge: &str, ip: Option<&str>, mbit: u64) -> Result<()> {
        let peer = format!("{name}p");
        sh(&["ip", "link", "add", name, "netns", ns, "type", "veth", "peer", "name", &peer, "netns", SWITCH_NS])?;
        if let Some(ip) = ip {
            sh(&["ip", "-n", ns, "addr", "add", &format!("{ip}/24"), "dev", name])?;
        }
        sh(&["ip", "-n", SWITCH_NS, "link", "set", &peer, "master", bridge])?;
        sh(&["ip", "-n", ns, "link", "set", name, "up"])?;
        sh(&["ip", "-n", SWITCH_NS, "link", "set", &peer, "up"])?;
        shape(ns, name, mbit)?;
        shape(SWITCH_NS, &peer, mbit)
    }

    fn down(&self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.down();
    }
}
