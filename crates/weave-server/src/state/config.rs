//! What `weave serve` is configured with, and the defaults.

use super::replicated::EtcdConfig;
use crate::auth::Tenants;
use crate::limits::InputLimits;
use std::path::PathBuf;
use std::time::Duration;
use weave_core::ClusterConfig;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub tenants: Tenants,
    pub cluster: ClusterConfig,
    pub capacity: Capacity,
    pub heartbeat_timeout: Duration,
    pub max_body_bytes: usize,
    /// Longest a phase-start request waits before answering "not yet".
    pub max_wait: Duration,
    /// The largest bounded staleness a new submission may ask for (checked at submission,
    /// not when records are replayed).
    pub max_staleness: u32,
    pub placement: PlacementConfig,
    pub limits: ConnectionLimits,
    /// Compact the store (snapshot the plane, drop the records it covers) once this many
    /// records follow the last snapshot; 0: never. Restart time is then bounded by the
    /// snapshot and at most this many records, not by history.
    pub snapshot_every: u64,
    /// History the plane holds (newest events, ended jobs).
    pub retention: crate::plane::Retention,
    /// Compact as well once this many bytes of records were appended since the last snapshot
    /// began (0: by count only): with large records (launch environments, metadata) the log
    /// on disk stays bounded in bytes, not only in records.
    pub snapshot_every_bytes: u64,
    /// Jobs one tenant may have running or queued at once (0: no limit); more are refused
    /// with 429. Admins are not limited.
    pub max_jobs_per_tenant: usize,
    /// `/readyz` says not ready while the store's volume has less free space than this (or
    /// than a twentieth of the volume, on a small one): a write may fail there however a
    /// small probe fares.
    pub min_free_bytes: u64,
    /// Keep the record log in this etcd cluster instead of the embedded store: several
    /// replicas share it, one active (`None`: the embedded store in `data_dir`).
    pub etcd: Option<EtcdConfig>,
}

impl ServerConfig {
    /// A server on the store in `data_dir` with every other setting at its default: open
    /// access (one implicit admin), the paper's testbed, elastic pools, a minute's heartbeat
    /// timeout, full Weave placement. Tests and benchmarks start here and change what they
    /// need (`ServerConfig { capacity, ..ServerConfig::new(dir) }`).
    pub fn new(data_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            data_dir,
            tenants: Tenants::open_access(),
            cluster: ClusterConfig::default(),
            capacity: Capacity::Elastic,
            heartbeat_timeout: Duration::from_secs(60),
            max_body_bytes: 64 * 1024,
            max_wait: Duration::from_secs(30),
            max_staleness: weave_core::MAX_STALENESS,
            placement: PlacementConfig::default(),
            limits: ConnectionLimits::default(),
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            retention: crate::plane::Retention::default(),
            snapshot_every_bytes: DEFAULT_SNAPSHOT_EVERY_BYTES,
            max_jobs_per_tenant: DEFAULT_MAX_JOBS_PER_TENANT,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            etcd: None,
        }
    }
}

/// The free space `/readyz` asks for unless configured otherwise.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// Bytes of records between snapshots unless configured otherwise.
pub const DEFAULT_SNAPSHOT_EVERY_BYTES: u64 = 64 << 20;

/// Running or queued jobs per tenant unless configured otherwise.
pub const DEFAULT_MAX_JOBS_PER_TENANT: usize = 100;

/// Records between snapshots unless configured otherwise.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 100_000;

/// Records between snapshots in etcd unless configured otherwise: a record read through
/// etcd's gateway costs about 20 us against 3 us to apply, so that a replica with a million
/// records behind it starts within 2 s (`weave bench restart --etcd`).
pub const DEFAULT_SNAPSHOT_EVERY_ETCD: u64 = 20_000;

/// What one client may hold or ask of the server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionLimits {
    /// A connection must deliver a request's headers within this (slow clients are cut).
    pub header_timeout: Duration,
    /// And its body within this.
    pub body_timeout: Duration,
    /// Open connections at most; more are answered 503 and closed. `None`: from the process's
    /// open-file limit (see [`crate::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// Open connections from one client address at most (more are answered 503 and closed),
    /// so one client cannot fill `max_connections` before it sends a token; `None`: no limit
    /// (behind a proxy every client has the proxy's address).
    pub max_connections_per_address: Option<usize>,
    /// Requests per second per bearer token, with this burst; `None`: unlimited.
    pub rate: Option<(u32, u32)>,
    /// And requests per second per token, with this burst, to the routes whose answers grow
    /// with the plane (history, listings, the status page: `routes::Cost::GrowsWithPlane`);
    /// `None`: only `rate` applies.
    pub read_rate: Option<(u32, u32)>,
    /// How large the strings and maps a client may have kept are.
    pub inputs: InputLimits,
}

/// Connections one address may hold unless configured otherwise.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 1024;

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(20),
            max_connections: None,
            max_connections_per_address: Some(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS),
            rate: None,
            read_rate: None,
            inputs: InputLimits::default(),
        }
    }
}

/// How the plane places jobs beyond the paper's rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlacementConfig {
    /// Co-located mode and consolidation moves: full Weave, as the replay measures it (on
    /// by default; `--disagg-only` places as the paper's Weave). A move re-admits a job, so
    /// its driver must follow re-admissions (`Requeued`; the Ray backend relaunches).
    pub consolidate: bool,
    /// How often the periodic consolidation pass runs (`--consolidate-every-s`).
    pub consolidate_every: Duration,
    /// The operator named the placement (`--disagg-only` or `--consolidate`): a store written
    /// before the placement was recorded beside it opens only then (see `check_placement`).
    pub chosen: bool,
    /// Admission's allowed risk that a job's life slowdown exceeds its SLO (`--slo-risk`).
    pub slo_risk: f64,
    /// Lend idle rollout blocks to rollouts of other groups (`--lending`; off by default).
    pub lending: bool,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            consolidate: true,
            consolidate_every: Duration::from_micros(weave_place::consolidate::PASS_INTERVAL.0),
            chosen: false,
            slo_risk: weave_place::DEFAULT_SLO_EPSILON,
            lending: false,
        }
    }
}

/// Where the node pools' sizes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// Rent nodes on demand (fresh node names, never reused).
    Elastic,
    /// The cluster config's pools, fixed.
    Fixed,
    /// Fixed pools whose sizes an execution backend reports as durable `Inventory` records
    /// (replay sees the sizes every decision saw).
    Recorded,
}
