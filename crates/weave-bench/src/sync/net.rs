//! The emulated mini cluster the sync benchmark runs on: one network namespace per GPU, each
//! with its own NIC on the slow inter-pool link, and each rollout GPU with a second port on
//! the rollout pool's fast fabric. Both links are switches (bridges in a namespace of their
//! own) whose every port is rate-limited in both directions (`tc tbf` on the GPU's side
//! limits what it sends, on the switch's side what it receives). This is the topology the
//! planner's prediction assumes: a stream per NIC pair on the slow link, the fabric's rate
//! per GPU, not one rate shared by all of them.

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

/// Rollout GPU `j`'s address on the fast fabric (where its peers fetch from it).
pub fn rollout_ip(j: u32) -> String {
    format!("10.214.0.{}", 100 + j)
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
            fabric.port(&train_ns(i), &format!("t{i}s"), SLOW_BRIDGE, &train_ip(i), slow_mbit)?;
        }
        for j in 0..rollout {
            let slow_ip = format!("10.213.0.{}", 100 + j);
            fabric.port(&rollout_ns(j), &format!("r{j}s"), SLOW_BRIDGE, &slow_ip, slow_mbit)?;
            fabric.port(&rollout_ns(j), &format!("r{j}f"), FAST_BRIDGE, &rollout_ip(j), fast_mbit)?;
        }
        Ok(fabric)
    }

    /// A GPU's NIC `name` in `ns`, plugged into `bridge`, shaped both ways.
    fn port(&self, ns: &str, name: &str, bridge: &str, ip: &str, mbit: u64) -> Result<()> {
        let peer = format!("{name}p");
        sh(&["ip", "link", "add", name, "netns", ns, "type", "veth", "peer", "name", &peer, "netns", SWITCH_NS])?;
        sh(&["ip", "-n", ns, "addr", "add", &format!("{ip}/24"), "dev", name])?;
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
