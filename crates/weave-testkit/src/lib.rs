//! Prerequisites of Weave's tests, handled one way everywhere.
//!
//! Two kinds, treated differently on purpose:
//!
//! - **Data beside the project** (`../shared`): a test that needs it and does not find it
//!   skips, says so on stderr, and appends one line to the file `$WEAVE_SKIP_LOG` names (if
//!   set). CI sets it and fails when the file is not empty, so a skip is counted, never
//!   taken for a pass there.
//! - **Tools an ignored test needs** (python3, root, Ray, torch): those tests run only under
//!   `--ignored`, where the caller asked for them; a missing tool fails the test naming what
//!   is missing, so a broken install step in CI cannot turn into a green run that tested
//!   nothing.

pub mod etcd;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the file that counts skips.
pub const SKIP_LOG: &str = "WEAVE_SKIP_LOG";

/// `../shared/<relative>` from a crate's manifest directory (`crates/<name>`).
pub fn shared_path(manifest_dir: &str, relative: &str) -> PathBuf {
    Path::new(manifest_dir).join("../../../shared").join(relative)
}

/// Records that `test` skipped because of `reason`: on stderr and, if `$WEAVE_SKIP_LOG` is
/// set, as one line of that file (CI fails on any).
pub fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
    let Some(log) = std::env::var_os(SKIP_LOG) else { return };
    let line = format!("{test}: {reason}\n");
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(&log).and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        // The count is what CI trusts: failing to keep it must not look like a pass.
        panic!("{test} skipped ({reason}) and could not record it in {}: {e}", Path::new(&log).display());
    }
}

/// The text of `path`, or `None` after a counted [`skip`] naming it.
pub fn read_or_skip(test: &str, path: &Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) => {
            skip(test, &format!("{} not readable ({e})", path.display()));
            None
        }
    }
}

/// Whether `path` exists; if not, a counted [`skip`] naming it.
pub fn exists_or_skip(test: &str, path: &Path) -> bool {
    let there = path.exists();
    if !there {
        skip(test, &format!("{} not present", path.display()));
    }
    there
}

/// Fails the (ignored) test `test` unless `present`, naming what is missing and how to get it.
#[track_caller]
pub fn require(test: &str, present: bool, missing: &str) {
    assert!(present, "{test} cannot run: {missing} (this test runs only under --ignored, where a missing prerequisite is a failure, not a skip)");
}

/// A Python 3 interpreter on the PATH; fails the (ignored) test `test` if there is none.
#[track_caller]
pub fn python(test: &str) -> &'static str {
    let found = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()));
    require(test, found.is_some(), "no python3 on the PATH");
    found.expect("checked")
}

/// Whether this process runs as root (namespaces, mounts).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A local cluster one of `scripts/`'s scripts brings up (`ray-local.sh`, `slurm-local.sh`),
/// with the settings it reads from the environment; taken down (`<script> down`) when dropped,
/// even by a panic.
pub struct LocalCluster {
    pub script: PathBuf,
    pub env: Vec<(String, String)>,
}

impl LocalCluster {
    /// `<script> <args>` with the cluster's settings.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.script);
        c.args(args).envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.cmd(&["down"]).status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "cannot run: no thing")]
    fn a_missing_requirement_fails() {
        require("t", false, "no thing");
    }

    #[test]
    fn a_skip_is_counted_in_the_log() {
        let log = std::env::temp_dir().join(format!("weave-testkit-skips-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        // Tests in this crate run in one process: set the variable only around this call's
        // own file (no other test here reads it).
        std::env::set_var(SKIP_LOG, &log);
        assert!(!exists_or_skip("t", Path::new("/nonexistent/weave-testkit")));
        assert!(exists_or_skip("t", Path::new("/")));
        std::env::remove_var(SKIP_LOG);
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("t: /nonexistent/weave-testkit not present"), "{text}");
        let _ = std::fs::remove_file(&log);
    }
}
