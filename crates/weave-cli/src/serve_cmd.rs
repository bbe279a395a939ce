//! `weave serve` and `weave token hash`.

use crate::input::load_cluster;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weave_server::plane::Record;
use weave_server::state::replicated::EtcdConfig;
use weave_server::{Capacity, ServerConfig, Shared, Tenants};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7070")]
    addr: String,
    /// Directory for the durable store.
    #[arg(long, value_name = "DIR", default_value = "weave-data")]
    data: PathBuf,
    /// Tenants: who may call and what each may use (TOML: `[[tenant]]` name, token_sha256,
    /// admin; with --fixed-capacity also a quota, `rollout_nodes`, `training_nodes`, and a
    /// `borrow_limit`; a `[sharing]` table with `preemption`, `backfill` and `min_run_s`
    /// lets a waiting job preempt borrowed capacity and lower-priority jobs, and start jobs
    /// behind a blocked one when that does not delay it). Jobs carry a `priority` (low, normal,
    /// high) in their submission.
    #[arg(long, value_name = "FILE")]
    tenants: Option<PathBuf>,
    /// Run without authentication (one implicit admin). Local experiments only.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Cluster config (TOML); the paper's testbed when omitted.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Limit nodes to the configured pools instead of renting on demand. A job that does not
    /// fit waits in a queue (with quotas: by priority, then its tenant's dominant share, then
    /// arrival; `weave job list` shows its position) and starts when capacity frees.
    #[arg(long)]
    fixed_capacity: bool,
    /// A job whose heartbeats stop for this long is marked failed.
    #[arg(long, default_value_t = 60.0)]
    heartbeat_timeout_s: f64,
    /// Largest request body accepted, bytes.
    #[arg(long, default_value_t = 64 * 1024)]
    max_body_bytes: usize,
    /// Execution backend: `none` (jobs run themselves and ask Weave where and when), `ray`
    /// (Weave launches admitted jobs on a Ray cluster whose labelled nodes are its inventory) or
    /// `slurm` (as Slurm batch jobs on the Slurm nodes named as Weave's: r0.., t0..).
    #[arg(long, value_enum, default_value = "none")]
    backend: Backend,
    /// The Ray dashboard's HTTP address (State and Job Submission APIs).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8265")]
    ray_address: String,
    /// The server's URL as launched jobs reach it, and as standbys name it while it leads
    /// (default: http://<bound address>).
    #[arg(long, value_name = "URL")]
    advertise_url: Option<String>,
    /// What launched jobs get as WEAVE_SERVER: every replica's URL, comma-separated, so that a
    /// job's driver follows the active one after a failover (default: --advertise-url).
    #[arg(long, value_name = "URLS")]
    job_server_urls: Option<String>,
    /// How long a launched job must stay ended before it fails its Weave job, seconds (a
    /// node's death is told apart from the job's own failure in this time).
    #[arg(long, alias = "ray-grace-s", default_value_t = 10.0)]
    backend_grace_s: f64,
    /// A launch the backend keeps pending this long (it cannot start) fails the job, seconds.
    #[arg(long, alias = "ray-pending-limit-s", default_value_t = 300.0)]
    backend_pending_limit_s: f64,
    /// How long a node the cluster manager drains keeps serving its jobs under Weave's
    /// preemption notice before Weave takes it out of service, seconds (sooner if the manager
    /// reports it gone).
    #[arg(long, default_value_t = weave_backend::DRAIN_NOTICE.as_secs_f64())]
    backend_drain_notice_s: f64,
    /// A prefix for Slurm's commands (`sinfo`, `squeue`, `sbatch`, `scancel`), split at
    /// spaces: e.g. `ssh login1`, or `scripts/slurm-local.sh exec`. Empty: run them here.
    #[arg(long, default_value = "")]
    slurm_command: String,
    /// The Slurm partition launches go to (Slurm's default partition when omitted).
    #[arg(long)]
    slurm_partition: Option<String>,
    /// Where each Slurm launch writes its output (`<dir>/<launch id>.out`).
    #[arg(long, value_name = "DIR")]
    slurm_output: Option<PathBuf>,
    /// How launched jobs pin their Ray placement-group bundles: `auto` (label selectors on
    /// `weave.io/node` where the job's Ray has them, else custom resources), `labels` or
    /// `resources` (the fallback, forced).
    #[arg(long, value_parser = ["auto", "labels", "resources"])]
    ray_pin: Option<String>,
    /// Place as the paper's Weave (disaggregated groups only, nothing ever moves), for
    /// drivers that cannot follow a re-admission. By default the server runs full Weave, as
    /// `weave simulate` measures it: co-located mode as an option and consolidation moves
    /// (jobs that run alone are paired into groups, on arrivals, departures and a periodic
    /// pass). A move re-admits the job from its last completed iteration under a new
    /// admission: its driver hears `Requeued` and resumes there (the Ray backend relaunches).
    #[arg(long)]
    disagg_only: bool,
    /// Full Weave placement, named explicitly (the default): needed once to open a store
    /// written before the placement was recorded beside it, if it was written with full Weave.
    #[arg(long, conflicts_with = "disagg_only")]
    consolidate: bool,
    /// How often the periodic consolidation pass looks at every job that runs alone, in
    /// seconds (besides arrivals and departures).
    #[arg(long, default_value_t = 1800.0)]
    consolidate_every_s: f64,
    /// Admission's allowed risk that a job's life slowdown exceeds its SLO under variation.
    #[arg(long, default_value_t = weave_place::DEFAULT_SLO_EPSILON)]
    slo_risk: f64,
    /// Lend a group's idle rollout nodes (its members all training) to a rollout of another
    /// group that the request-level model says it shortens, by the policy `weave simulate
    /// --lending` replays. The rollout's grant names the lent nodes and a reclaim deadline;
    /// the driver spreads requests onto them and moves them back by then. Off by default.
    #[arg(long)]
    lending: bool,
    /// Export OpenTelemetry spans (OTLP over HTTP, protobuf) to this URL, e.g.
    /// http://127.0.0.1:4318/v1/traces: one per job admission, per granted phase, per planned
    /// switch and weight sync. Off by default.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// A client must send a request's headers within this, seconds (slow clients are cut).
    #[arg(long, default_value_t = 20.0)]
    header_timeout_s: f64,
    /// And its body within this, seconds.
    #[arg(long, default_value_t = 20.0)]
    body_timeout_s: f64,
    /// Open connections at most (more are answered 503 and closed); default: the open-file
    /// limit, raised to its hard limit at start, less 256.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Open connections from one client address at most (more are answered 503 and closed);
    /// 0: no limit (behind a proxy, where every client has the proxy's address).
    #[arg(long, default_value_t = weave_server::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)]
    max_connections_per_address: usize,
    /// Requests per second per bearer token (429 beyond; 0: unlimited).
    #[arg(long, default_value_t = 200)]
    rate_limit_per_s: u32,
    /// Requests a token may send at once before the per-second rate applies.
    #[arg(long, default_value_t = 400)]
    rate_limit_burst: u32,
    /// And requests per second per token to the reads whose answers grow with the plane
    /// (events, job lists and histories, groups, nodes, the queue, /status, /metrics), so that
    /// one tenant's reads cannot take the CPU other tenants' gates need (0: no such limit).
    #[arg(long, default_value_t = 10)]
    read_rate_limit_per_s: u32,
    /// Such reads a token may send at once before their per-second rate applies.
    #[arg(long, default_value_t = 20)]
    read_rate_limit_burst: u32,
    /// Keep the record log in this etcd cluster (client URLs), shared by replicas: one serves,
    /// the others stand by until its leadership lease (--lease-s) expires.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    /// Where this Weave's keys live in etcd.
    #[arg(long, default_value = "/weave")]
    etcd_prefix: String,
    /// This replica's name in etcd (default: host name and process id).
    #[arg(long)]
    replica: Option<String>,
    #[arg(long, default_value_t = 5)]
    lease_s: i64,
    /// Snapshot the plane and drop the records it covers once this many records follow the
    /// last snapshot (restart then replays at most this many); 0: never. Default: 100,000,
    /// and 20,000 with --etcd (where reading a record costs several times applying it).
    #[arg(long)]
    snapshot_every: Option<u64>,
    /// Events the server holds (the newest; `/v1/events` pages through them).
    #[arg(long, default_value_t = weave_server::plane::Retention::default().events)]
    keep_events: usize,
    /// And at most this many MiB of them (as the server counts an event's strings and
    /// metadata), whichever bound comes first.
    #[arg(long, default_value_t = weave_server::plane::Retention::default().event_bytes >> 20)]
    keep_events_mib: u64,
    /// Snapshot as well once this many MiB of records follow the last snapshot (0: by count
    /// only), so that large records cannot grow the log on disk without bound.
    #[arg(long, default_value_t = weave_server::DEFAULT_SNAPSHOT_EVERY_BYTES >> 20)]
    snapshot_every_mib: u64,
    /// Jobs one tenant may have running or queued at once (0: no limit); admins are not
    /// limited.
    #[arg(long, default_value_t = weave_server::DEFAULT_MAX_JOBS_PER_TENANT)]
    max_jobs_per_tenant: usize,
    /// `/readyz` says not ready while the store's volume has less free space than this, in
    /// MiB (or than a twentieth of the volume, on a small one).
    #[arg(long, default_value_t = weave_server::DEFAULT_MIN_FREE_BYTES >> 20)]
    min_free_mib: u64,
    /// The longest reason a client may give (a restart's, a node's), in characters.
    #[arg(long, default_value_t = weave_server::InputLimits::default().reason_chars)]
    max_reason_chars: usize,
    /// The largest `meta` a phase finish may carry, in bytes of compact JSON.
    #[arg(long, default_value_t = weave_server::InputLimits::default().meta_bytes)]
    max_meta_bytes: usize,
    /// The largest `launch.env` a submission may carry, names and values together, in bytes.
    #[arg(long, default_value_t = weave_server::InputLimits::default().env_bytes)]
    max_env_bytes: usize,
    /// Ended jobs the server holds (the most recent; an older one's name is free again).
    #[arg(long, default_value_t = weave_server::plane::Retention::default().jobs)]
    keep_ended_jobs: usize,
    /// The largest bounded staleness a submission may ask for (weights versions a rollout
    /// may lag training; 0 admits on-policy jobs only; at most 8).
    #[arg(long, default_value_t = weave_core::MAX_STALENESS, value_parser = clap::value_parser!(u32).range(0..=weave_core::MAX_STALENESS as i64))]
    max_staleness: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    None,
    Ray,
    Slurm,
}

type Driver = Box<dyn weave_backend::ClusterDriver>;

/// The backend's driver and the fixed pools its nodes make (waits up to a minute for the
/// manager to answer).
fn backend_driver(args: &ServeArgs, cluster: &mut weave_core::ClusterConfig) -> Result<Option<(Driver, (u32, u32))>> {
    let patience = Duration::from_secs(60);
    let (driver, sizes, notes): (Driver, _, _) = match args.backend {
        Backend::None => return Ok(None),
        Backend::Ray => {
            let pin = args.ray_pin.clone().filter(|p| p != "auto");
            let c = weave_ray::RayDriver::connect(&args.ray_address, pin, cluster, patience)
                .with_context(|| format!("the Ray cluster at {} (waited up to 60 s)", args.ray_address))?;
            (Box::new(c.driver), c.pools, c.notes)
        }
        Backend::Slurm => {
            let (partition, output) = (args.slurm_partition.as_deref(), args.slurm_output.clone());
            let (d, sizes) = weave_slurm::SlurmDriver::connect(&args.slurm_command, partition, output, patience)
                .context("Slurm's nodes (sinfo; waited up to 60 s)")?;
            (cluster.rollout.nodes, cluster.training.nodes) = sizes;
            (Box::new(d), sizes, vec![format!("Slurm: {} rollout and {} training nodes", sizes.0, sizes.1)])
        }
    };
    for note in notes {
        eprintln!("weave serve: {note}");
    }
    Ok(Some((driver, sizes)))
}

fn connection_limits(args: &ServeArgs) -> Result<weave_server::ConnectionLimits> {
    let secs = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 && v <= 3600.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(anyhow::anyhow!("{name} must be in (0, 3600] seconds, got {v}"))
        }
    };
    if args.max_connections == Some(0) {
        bail!("--max-connections must be at least 1");
    }
    // Connections need descriptors: take what the hard limit allows.
    let limit = weave_server::raise_open_file_limit();
    if let (Some(n), Some(l)) = (args.max_connections, limit) {
        if n as u64 + 64 > l {
            eprintln!("weave serve: warning: --max-connections {n} is close to the open-file limit {l}");
        }
    }
    Ok(weave_server::ConnectionLimits {
        header_timeout: secs("--header-timeout-s", args.header_timeout_s)?,
        body_timeout: secs("--body-timeout-s", args.body_timeout_s)?,
        max_connections: args.max_connections,
        max_connections_per_address: (args.max_connections_per_address > 0).then_some(args.max_connections_per_address),
        rate: (args.rate_limit_per_s > 0).then_some((args.rate_limit_per_s, args.rate_limit_burst.max(1))),
        read_rate: (args.read_rate_limit_per_s > 0)
            .then_some((args.read_rate_limit_per_s, args.read_rate_limit_burst.max(1))),
        inputs: weave_server::InputLimits {
            reason_chars: args.max_reason_chars,
            meta_bytes: args.max_meta_bytes,
            env_bytes: args.max_env_bytes,
        },
    })
}

/// Opens and replays the store, turns tracing on, records a backend's inventory.
fn open_shared(
    cfg: ServerConfig,
    data: &std::path::Path,
    otlp: Option<&str>,
    inventory: Option<(u32, u32)>,
) -> Result<Arc<Shared>> {
    let mut shared = Shared::open(cfg).with_context(|| format!("cannot open the store in {}", data.display()))?;
    if let Some(url) = otlp {
        let telemetry = weave_server::telemetry::Telemetry::otlp(url, shared.now_us())?;
        shared = shared.with_telemetry(telemetry);
    }
    if let Some((rollout, training)) = inventory {
        shared
            .commit(|time_us| Record::Inventory { time_us, rollout, training })
            .context("cannot record the backend's inventory")?;
    }
    Ok(Arc::new(shared))
}

fn load_tenants(args: &ServeArgs) -> Result<Tenants> {
    Ok(match (&args.tenants, args.insecure_no_auth) {
        (Some(p), false) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read tenants file {}", p.display()))?;
            Tenants::from_toml(&text).with_context(|| format!("invalid tenants file {}", p.display()))?
        }
        (None, true) => Tenants::open_access(),
        (Some(_), true) => bail!("give either --tenants or --insecure-no-auth, not both"),
        (None, false) => bail!("authentication needs --tenants FILE (hash tokens with `weave token hash`), or --insecure-no-auth for local experiments"),
    })
}

/// Refuses durations and risks out of range, naming the flag.
fn check_args(args: &ServeArgs) -> Result<()> {
    if let Some(urls) = &args.job_server_urls {
        if urls.split(',').any(|u| !u.trim().starts_with("http://") && !u.trim().starts_with("https://")) {
            bail!("--job-server-urls takes URLs such as http://10.0.0.5:8080,http://10.0.0.6:8080, got {urls}");
        }
    }
    if !(args.slo_risk.is_finite() && args.slo_risk > 0.0 && args.slo_risk <= 0.5) {
        bail!("--slo-risk must be in (0, 0.5], got {}", args.slo_risk);
    }
    if !(args.heartbeat_timeout_s.is_finite() && args.heartbeat_timeout_s > 0.0) {
        bail!("--heartbeat-timeout-s must be positive");
    }
    if !(args.consolidate_every_s.is_finite() && args.consolidate_every_s > 0.0 && args.consolidate_every_s <= 1e9) {
        bail!("--consolidate-every-s must be in (0, 1e9] seconds, got {}", args.consolidate_every_s);
    }
    if !(args.backend_grace_s.is_finite() && args.backend_grace_s >= 0.0) {
        bail!("--backend-grace-s must be non-negative");
    }
    if !(args.backend_pending_limit_s.is_finite() && args.backend_pending_limit_s > 0.0) {
        bail!("--backend-pending-limit-s must be positive");
    }
    if !(args.backend_drain_notice_s.is_finite()
        && args.backend_drain_notice_s > 0.0
        && args.backend_drain_notice_s <= 1e7)
    {
        bail!("--backend-drain-notice-s must be in (0, 1e7] seconds, got {}", args.backend_drain_notice_s);
    }
    Ok(())
}

fn server_config(
    args: &ServeArgs,
    tenants: Tenants,
    cluster: weave_core::ClusterConfig,
    ray: bool,
) -> Result<ServerConfig> {
    Ok(ServerConfig {
        data_dir: args.data.clone(),
        tenants,
        cluster,
        // Ray's nodes are the machines there are; their count is recorded durably.
        capacity: match (ray, args.fixed_capacity) {
            (true, _) => Capacity::Recorded,
            (false, true) => Capacity::Fixed,
            (false, false) => Capacity::Elastic,
        },
        heartbeat_timeout: Duration::from_secs_f64(args.heartbeat_timeout_s),
        max_body_bytes: args.max_body_bytes,
        max_wait: Duration::from_secs(30),
        max_staleness: args.max_staleness,
        placement: weave_server::state::PlacementConfig {
            consolidate: !args.disagg_only,
            consolidate_every: std::time::Duration::from_secs_f64(args.consolidate_every_s),
            chosen: args.disagg_only || args.consolidate,
            slo_risk: args.slo_risk,
            lending: args.lending,
        },
        limits: connection_limits(args)?,
        snapshot_every: args.snapshot_every.unwrap_or(if args.etcd.is_empty() {
            weave_server::DEFAULT_SNAPSHOT_EVERY
        } else {
            weave_server::DEFAULT_SNAPSHOT_EVERY_ETCD
        }),
        retention: weave_server::plane::Retention {
            events: args.keep_events,
            event_bytes: args.keep_events_mib.max(1) << 20,
            jobs: args.keep_ended_jobs,
        },
        min_free_bytes: args.min_free_mib << 20,
        snapshot_every_bytes: args.snapshot_every_mib << 20,
        max_jobs_per_tenant: args.max_jobs_per_tenant,
        etcd: etcd_config(args)?,
    })
}

/// `--etcd` and its settings, if given.
fn etcd_config(a: &ServeArgs) -> Result<Option<EtcdConfig>> {
    let e = (!a.etcd.is_empty()).then(|| EtcdConfig::new(&a.etcd, &a.etcd_prefix, a.replica.clone(), a.lease_s));
    e.transpose().map_err(|e| anyhow::anyhow!(e))
}

pub fn serve(args: ServeArgs) -> Result<()> {
    let tenants = load_tenants(&args)?;
    check_args(&args)?;
    let mut cluster = load_cluster(args.cluster.as_deref())?;
    let driver = backend_driver(&args, &mut cluster)?;
    let pools = (driver.is_some() || args.fixed_capacity).then_some((cluster.rollout.nodes, cluster.training.nodes));
    if let Some(p) = &args.tenants {
        tenants.check_pools(pools).with_context(|| format!("invalid tenants file {}", p.display()))?;
    }
    let mut cfg = server_config(&args, tenants, cluster, driver.is_some())?;
    weave_server::tune_allocator();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.addr)
            .await
            .with_context(|| format!("cannot listen on {}", args.addr))?;
        let addr = listener.local_addr()?;
        if let Some(e) = &mut cfg.etcd {
            e.url = Some(args.advertise_url.clone().unwrap_or_else(|| format!("http://{addr}")));
        }
        // The store is replayed off the async workers; meanwhile the port answers 503
        // "recovering" instead of refusing connections.
        let inventory = driver.as_ref().map(|(_, sizes)| *sizes);
        let otlp = args.otlp_endpoint.clone();
        let data = args.data.clone();
        let note = cfg.etcd.as_ref().map(|e| e.opening.clone()).unwrap_or_default();
        let opening = tokio::task::spawn_blocking(move || open_shared(cfg, &data, otlp.as_deref(), inventory));
        let why = move || note.lock().map(|n| n.clone()).unwrap_or_default();
        let shared =
            weave_server::answer_while_opening(&listener, opening, why).await.context("opening the store")??;
        eprintln!("weave serve: listening on http://{addr} (store {})", args.data.display());
        // Tests and scripts read the bound address (useful with port 0) from stdout: it is
        // printed once the server takes requests.
        println!("listening {addr}");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let backend = match driver {
            Some((driver, _)) => Some(start_backend(&args, addr, driver, shared.clone(), stop.clone()).await?),
            None => None,
        };
        let served =
            weave_server::serve(listener, shared, weave_server::shutdown_signal()).await.context("server failed");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(b) = backend {
            let _ = tokio::task::spawn_blocking(move || b.join()).await;
        }
        served
    })
}

/// The backend's first round (nodes the manager lacks are out of service before the first
/// submission can be placed), then its loop on a thread of its own until `stop`.
async fn start_backend(
    args: &ServeArgs,
    addr: std::net::SocketAddr,
    driver: Driver,
    shared: Arc<Shared>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let cfg = weave_backend::BackendConfig {
        server_url: (args.job_server_urls.clone().or_else(|| args.advertise_url.clone()))
            .unwrap_or_else(|| format!("http://{addr}")),
        poll: Duration::from_millis(500),
        grace: Duration::from_secs_f64(args.backend_grace_s),
        pending_limit: Duration::from_secs_f64(args.backend_pending_limit_s),
        drain_notice: Duration::from_secs_f64(args.backend_drain_notice_s),
    };
    let mut backend = weave_backend::Backend::new(driver, shared, cfg);
    // Off the async workers: the driver blocks.
    let (first, backend) =
        tokio::task::spawn_blocking(move || (backend.tick(), backend)).await.context("the backend's first round")?;
    first.context("the backend's first round")?;
    Ok(std::thread::spawn(move || backend.run(stop)))
}

#[derive(clap::Subcommand)]
pub enum TokenCommand {
    /// Print the SHA-256 hash of a token, for the tenants file. The token is read from
    /// standard input (its first line), so it never shows in `ps` or shell history; giving it
    /// as an argument still works.
    Hash { token: Option<String> },
}

pub fn token(cmd: TokenCommand) -> Result<()> {
    let TokenCommand::Hash { token } = cmd;
    let token = match token {
        Some(t) => t,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("cannot read the token from standard input")?;
            line.trim_end_matches(['\n', '\r']).to_string()
        }
    };
    if token.is_empty() {
        bail!("no token: give it on standard input (`weave token hash < FILE`)");
    }
    println!("{}", weave_server::auth::hex(&weave_server::auth::sha256(&token)));
    Ok(())
}
