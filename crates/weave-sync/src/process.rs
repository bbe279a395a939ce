//! What `weave sync send` and `weave sync receive` run, each as a process of its own: a sender
//! serving a model file's byte ranges, and a receiver that waits for the manifest, fetches its
//! part of the plan, serves what it holds to its peers and publishes the version. Each prints
//! `listening ADDR` once it listens; a receiver then prints one JSON line (its seconds, its
//! fetch statistics and the version published), which `weave sync bench` reads.

use crate::{current, receive, serve, Fault, Manifest, Source, Staging, SyncError};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn runtime() -> Result<tokio::runtime::Runtime, SyncError> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    rt.map_err(|e| SyncError::Setup(format!("cannot start the async runtime: {e}")))
}

async fn listen(addr: &str) -> Result<tokio::net::TcpListener, SyncError> {
    let l = tokio::net::TcpListener::bind(addr).await;
    l.map_err(|e| SyncError::Setup(format!("cannot listen on {addr}: {e}")))
}

/// Serves `model_file` as version `version` on `addr` until killed.
pub fn run_sender(model_file: PathBuf, version: u64, addr: &str, fault: Fault) -> Result<(), SyncError> {
    if !model_file.exists() {
        return Err(SyncError::Setup(format!("no model file {}", model_file.display())));
    }
    runtime()?.block_on(async move {
        let l = listen(addr).await?;
        println!("listening {}", l.local_addr()?);
        serve(l, Source::whole(model_file, version), fault).await?;
        Ok(())
    })
}

fn wait_for_manifest(path: &Path) -> Result<Manifest, SyncError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return serde_json::from_str(&text)
                .map_err(|e| SyncError::Manifest(format!("{}: invalid manifest: {e}", path.display())));
        }
        if Instant::now() > deadline {
            return Err(SyncError::Manifest(format!("no manifest at {} after 60 s", path.display())));
        }
        // Often: the benchmark times receivers from the moment they see it.
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Rollout GPU `me`'s side of the manifest's plan: listens on `addr` (its peers fetch from it),
/// fetches its ranges into `out`, publishes the version and stays `linger_s` for its peers.
pub fn run_receiver(manifest: &Path, me: u32, addr: &str, out: &Path, linger_s: f64) -> Result<(), SyncError> {
    runtime()?.block_on(async move {
        let l = listen(addr).await?;
        let local: SocketAddr = l.local_addr()?;
        println!("listening {local}");
        let p = manifest.to_path_buf();
        let m = tokio::task::spawn_blocking(move || wait_for_manifest(&p))
            .await
            .map_err(|e| SyncError::Setup(format!("waiting for the manifest: {e}")))??;
        let staging = Staging::create(out, m.version, m.plan.model_bytes)?;
        tokio::spawn(serve(l, staging.source(), Fault::default()));
        let t = Instant::now();
        let stats = receive(&m, me, &staging, out).await?;
        let secs = t.elapsed().as_secs_f64();
        println!("{}", serde_json::json!({ "me": me, "seconds": secs, "stats": stats, "published": current(out) }));
        tokio::time::sleep(Duration::from_secs_f64(linger_s.max(0.0))).await;
        let _ = std::fs::remove_file(&staging.path);
        Ok(())
    })
}
