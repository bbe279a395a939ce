//! `weave serve` and `weave token hash`.

use crate::input::load_cluster;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weave_server::{ServerConfig, Shared, Tenants};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7070")]
    addr: String,
    /// Directory for the durable store.
    #[arg(long, value_name = "DIR", default_value = "weave-data")]
    data: PathBuf,
    /// Tenants and their token hashes (TOML: [[tenant]] name, token_sha256, admin).
    #[arg(long, value_name = "FILE")]
    tenants: Option<PathBuf>,
    /// Run without authentication (one implicit admin). Local experiments only.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Cluster config (TOML); the paper's testbed when omitted.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Limit nodes to the configured pools instead of renting on demand.
    #[arg(long)]
    fixed_capacity: bool,
    /// A job whose heartbeats stop for this long is marked failed.
    #[arg(long, default_value_t = 60.0)]
    heartbeat_timeout_s: f64,
    /// Largest request body accepted, bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_body_bytes: usize,
}

pub fn serve(args: ServeArgs) -> Result<()> {
    let tenants = match (&args.tenants, args.insecure_no_auth) {
        (Some(p), false) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read tenants file {}", p.display()))?;
            Tenants::from_toml(&text).with_context(|| format!("invalid tenants file {}", p.display()))?
        }
        (None, true) => Tenants::open_access(),
        (Some(_), true) => bail!("give either --tenants or --insecure-no-auth, not both"),
        (None, false) => bail!("authentication needs --tenants FILE (hash tokens with `weave token hash`), or --insecure-no-auth for local experiments"),
    };
    if !(args.heartbeat_timeout_s.is_finite() && args.heartbeat_timeout_s > 0.0) {
        bail!("--heartbeat-timeout-s must be positive");
    }
    let cfg = ServerConfig {
        data_dir: args.data.clone(),
        tenants,
        cluster: load_cluster(args.cluster.as_deref())?,
        fixed_capacity: args.fixed_capacity,
        heartbeat_timeout: Duration::from_secs_f64(args.heartbeat_timeout_s),
        max_body_bytes: args.max_body_bytes,
        max_wait: Duration::from_secs(30),
    };
    let shared =
        Arc::new(Shared::open(cfg).with_context(|| format!("cannot open the store in {}", args.data.display()))?);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        eprintln!("weave serve: listening on http://{addr} (store {})", args.data.display());
        // Tests and scripts read the bound address (useful with port 0) from stdout.
        println!("listening {addr}");
        // Ctrl-C or SIGTERM: stop accepting, finish what is in flight. (Every acknowledged
        // request is already durable, so a SIGKILL loses nothing either.)
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        };
        weave_server::serve(listener, shared, shutdown).await.context("server failed")
    })
}

#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// Print the SHA-256 hash of a token, for the tenants file.
    Hash { token: String },
}

pub fn token(cmd: TokenCommand) -> Result<()> {
    let TokenCommand::Hash { token } = cmd;
    println!("{}", weave_server::auth::hex(&weave_server::auth::sha256(&token)));
    Ok(())
}
