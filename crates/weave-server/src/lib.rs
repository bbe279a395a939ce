//! `weave serve`: the control plane. Admits real jobs, tells each where to run and gates
//! their phases at run time, on the same placer and dispatcher as the simulator, with every
//! acknowledged input durable in an embedded store.

pub mod auth;
pub mod http;
pub mod metrics;
mod openapi;
pub mod plane;
pub mod state;
mod status;
pub mod telemetry;

pub use auth::{Caller, Tenants};
pub use state::{Capacity, ServeError, ServerConfig, Shared};

use std::sync::Arc;
use std::time::Duration;

/// Serves on `listener` until `shutdown` resolves; expires heartbeats in the background.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reaper = shared.clone();
    let tick = Duration::from_millis(250).min(shared.cfg.heartbeat_timeout / 4).max(Duration::from_millis(10));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(tick).await;
            let r = reaper.clone();
            // The store's fsync blocks: keep it off the async workers.
            let _ = tokio::task::spawn_blocking(move || r.expire_heartbeats()).await;
        }
    });
    // On shutdown, parked long-polls are answered at once ("waiting": the client asks again,
    // after the restart) instead of holding the graceful shutdown for their whole wait.
    let closing = shared.clone();
    let shutdown = async move {
        shutdown.await;
        closing.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        closing.changed.send_modify(|v| *v += 1);
    };
    let exporting = shared.clone();
    let served = axum::serve(listener, http::router(shared)).with_graceful_shutdown(shutdown).await;
    // Spans still buffered go out before the process ends (the flush blocks: off the workers).
    if exporting.telemetry.is_some() {
        let _ = tokio::task::spawn_blocking(move || exporting.telemetry.as_ref().map(|t| t.shutdown())).await;
    }
    served
}
