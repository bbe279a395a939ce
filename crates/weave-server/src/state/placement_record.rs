//! The placement a store was written under, recorded beside it and checked on every start.

use super::{ServeError, ServerConfig};
use crate::plane::Plane;
use weave_store::Store;

/// The placement a store's records were decided under is part of what they mean: replayed
/// under another, its jobs would be placed elsewhere than their drivers were told. It is
/// recorded beside the store (atomically, with the store's mode) once the store is known to
/// replay under it, and checked on every start before anything is replayed. `Ok(Some(mode))`:
/// not recorded yet; record `mode` once the replay has worked ([`record_placement`]).
pub(super) fn check_placement(cfg: &ServerConfig, store: &Store) -> Result<Option<&'static str>, ServeError> {
    let path = cfg.data_dir.join("placement");
    let mode = placement_mode(cfg.placement.consolidate);
    let refuse = |message: String| ServeError::Placement { path: path.display().to_string(), message };
    match std::fs::read_to_string(&path) {
        Ok(written) if written.trim() == mode => Ok(None),
        Ok(written) => {
            let how = if written.trim() == "disagg-only" { "with --disagg-only" } else { "without --disagg-only" };
            Err(refuse(format!(
                "this store was written with `{}` placement, and replaying it with `{mode}` would move its jobs: \
                 start the server {how}, or give a new --data",
                written.trim()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !store.is_empty() && !cfg.placement.chosen {
                return Err(refuse(
                    "this store was written before its placement was recorded (earlier versions placed as the \
                     paper's Weave unless started with --consolidate): start with --disagg-only, the placement \
                     those versions used by default (or --consolidate if it was started with that); nothing is \
                     recorded until the store replays under it"
                        .into(),
                ));
            }
            Ok(Some(mode))
        }
        Err(e) => Err(refuse(format!("cannot read: {e}"))),
    }
}

fn placement_mode(consolidate: bool) -> &'static str {
    if consolidate {
        "full-weave"
    } else {
        "disagg-only"
    }
}

/// Records `mode` as the store's placement, after the replay under it worked; a replay that
/// failed records nothing and its error names the flag of the other placement.
pub(super) fn record_placement(
    cfg: &ServerConfig,
    mode: &str,
    replayed: Result<Plane, ServeError>,
) -> Result<Plane, ServeError> {
    let path = cfg.data_dir.join("placement");
    let refuse = |message: String| ServeError::Placement { path: path.display().to_string(), message };
    let plane = replayed.map_err(|e| {
        let other = if cfg.placement.consolidate { "--disagg-only" } else { "--consolidate" };
        refuse(format!(
            "the store does not replay under `{mode}` placement ({e}); nothing was recorded: if it was written \
             with the other placement, start with {other}"
        ))
    })?;
    write_atomically(&path, mode).map_err(|e| refuse(format!("cannot record the placement: {e}")))?;
    Ok(plane)
}

/// Writes `text` to `path` as the store writes its own files: a temporary file of mode 0600
/// beside it, synced, renamed over `path`, and the directory synced, so a crash leaves the old
/// file or the new one, never a part.
fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(path.parent().unwrap_or(std::path::Path::new(".")))?.sync_all()
}
