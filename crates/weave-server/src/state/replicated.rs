//! `weave serve --etcd`: the record log in an etcd cluster that several replicas share. A
//! replica starts by campaigning for `<prefix>/leader` under a lease; while another leads it
//! waits as a standby, and takes over when that lease expires (its holder died, or lost etcd).
//! The active replica reads the whole log, replays it as the embedded store's records are
//! replayed, and from then on writes each record only while it still leads: etcd refuses the
//! write of a deposed replica, which answers 503 and steps down. The job tokens' secret and
//! the placement the log was written under live in etcd too, so every replica mints and
//! checks the same tokens and replays the same way.

use super::{configured_plane, ServeError, ServerConfig};
use crate::auth::JobTokens;
use crate::durable::Durable;
use crate::durable::Replicated;
use crate::plane::{Plane, Record};
use std::time::{Duration, Instant};
use weave_etcd::log::{Followed, Leadership, Presence, RecordLog};
use weave_etcd::{Compare, Etcd, EtcdError, Op};

#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://host:2379`), tried in turn.
    pub endpoints: Vec<String>,
    /// Where this Weave's keys live (several Weaves may share one etcd).
    pub prefix: String,
    /// This replica's name (told to the others as the active's).
    pub replica: String,
    /// The leadership lease: a standby takes over at most this long after the active dies.
    pub lease_ttl_s: i64,
    /// Each call to etcd gives up after this long.
    pub timeout: Duration,
    /// What this replica is doing while it opens, for the answer its port gives meanwhile
    /// (a standby names the active replica).
    pub opening: std::sync::Arc<std::sync::Mutex<String>>,
    /// Where clients reach this replica (told to the others while it leads, so that a standby
    /// answers with the active one's address).
    pub url: Option<String>,
}

impl EtcdConfig {
    /// From `weave serve`'s flags: client URLs, the prefix, the replica's name (the host's
    /// name and the process id by default) and the lease; an error names the flag.
    pub fn new(
        endpoints: &[String],
        prefix: &str,
        replica: Option<String>,
        lease_s: i64,
    ) -> Result<EtcdConfig, String> {
        if !(2..=3_600).contains(&lease_s) {
            return Err(format!("--lease-s must be in [2, 3600] seconds, got {lease_s}"));
        }
        if endpoints.iter().any(|e| !e.starts_with("http://") && !e.starts_with("https://")) {
            return Err(format!("--etcd takes client URLs such as http://10.0.0.5:2379, got {}", endpoints.join(",")));
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Ok(EtcdConfig {
            endpoints: endpoints.to_vec(),
            prefix: prefix.trim_end_matches('/').to_string(),
            replica: replica.unwrap_or_else(|| format!("{}:{}", host.trim(), std::process::id())),
            lease_ttl_s: lease_s,
            timeout: Duration::from_secs(2),
            opening: Default::default(),
            url: None,
        })
    }
}

fn refused(e: impl std::fmt::Display) -> ServeError {
    ServeError::Replicated(e.to_string())
}

/// Connects (refusing an unreachable cluster), replays the log, and leads: while another
/// replica does, this one stands by following the log, so that it holds the state in memory
/// and takes over with only the records since its last look to apply. The durable side and the
/// plane it makes.
pub(super) fn open(cfg: &ServerConfig, e: &EtcdConfig) -> Result<(Durable, Plane, JobTokens), ServeError> {
    let etcd = Etcd::new(&e.endpoints, e.timeout).map_err(refused)?;
    etcd.check().map_err(|err| refused(format!("{err}: start etcd first, or check --etcd")))?;
    let job_tokens = job_tokens(&etcd, &e.prefix)?;
    let (mut log, read) = RecordLog::open(etcd.clone(), &e.prefix).map_err(refused)?;
    // A log written under another placement is refused before anything is replayed.
    check_placement(&etcd, &e.prefix, cfg, true)?;
    let mut plane = configured_plane(cfg);
    let from = match &read.snapshot {
        Some((at, state)) => format!("the snapshot at record {at} ({} bytes) and", state.len()),
        None => "no snapshot,".into(),
    };
    eprintln!("weave serve: replica {}: read {from} {} records from {}", e.replica, read.records.len(), e.prefix);
    apply(cfg, &mut plane, &log, read, &e.prefix)?;
    let mut told = None;
    // While it stands by, it says how far it has followed (the active's `/metrics` shows it).
    let mut presence = Presence::announce(&etcd, &e.prefix, &e.replica, (2 * e.lease_ttl_s).max(4)).map_err(refused)?;
    // The leadership key names the replica and where clients reach it.
    let campaign = match &e.url {
        Some(url) => format!("{} at {url}", e.replica),
        None => e.replica.clone(),
    };
    // It looks for the leader key every fifth of a second (one read) and campaigns only when
    // nobody holds it, so that it takes over soon after the active's lease is gone; it follows
    // the log and reports every half second.
    let mut followed = Instant::now();
    let leader = loop {
        let holder = match weave_etcd::log::leader(&etcd, &e.prefix) {
            Ok(Some(holder)) => Some(holder),
            Ok(None) => match Leadership::campaign(&etcd, &e.prefix, &campaign, e.lease_ttl_s) {
                Ok(Ok(leader)) => break leader,
                Ok(Err(holder)) => Some(holder).filter(|h| !h.is_empty()),
                Err(err) => passing(&e.replica, "campaigning", err).map(|()| None)?,
            },
            Err(err) => passing(&e.replica, "looking for the active replica", err).map(|()| None)?,
        };
        if let Some(holder) = holder.filter(|h| told.as_ref() != Some(h)) {
            eprintln!("weave serve: standby ({}): the active replica is {holder}", e.replica);
            let note = format!("standby: the active replica is {holder}; this one takes over if it is lost");
            *e.opening.lock().unwrap_or_else(|p| p.into_inner()) = note;
            told = Some(holder);
        }
        std::thread::sleep(Duration::from_millis(200));
        if followed.elapsed() < Duration::from_millis(500) {
            continue;
        }
        followed = Instant::now();
        match log.follow() {
            Ok(new) => apply(cfg, &mut plane, &log, new, &e.prefix)?,
            Err(err) => passing(&e.replica, "following the log", err)?,
        }
        // A report etcd missed is made again half a second later.
        let _ = presence.report(log.len());
    };
    let _ = presence.withdraw();
    // Leading now: nobody else writes; what was written before the election is the tail.
    let tail = read_tail(&mut log, &e.replica)?;
    let at_takeover = match &tail.snapshot {
        Some((at, _)) => format!("it read the snapshot at record {at} at the takeover"),
        None => format!("{} of them applied at the takeover", tail.records.len()),
    };
    apply(cfg, &mut plane, &log, tail, &e.prefix)?;
    eprintln!(
        "weave serve: active ({}): {} records ({} after the newest snapshot); {at_takeover}",
        e.replica,
        log.len(),
        log.len() - log.base()
    );
    *e.opening.lock().unwrap_or_else(|p| p.into_inner()) = String::new();
    check_placement(&etcd, &e.prefix, cfg, log.is_empty())?;
    record_placement(&etcd, &e.prefix, cfg)?;
    let durable = Replicated::new(etcd, log, leader, e.lease_ttl_s);
    Ok((Durable::Etcd(Box::new(durable)), plane, job_tokens))
}

/// A standby rides through what etcd answers while its members fail or elect (unreachable
/// for now, "leader changed"): said and tried again half a second later. A log it cannot read
/// (`Decode`) stops it.
fn passing(replica: &str, doing: &str, err: EtcdError) -> Result<(), ServeError> {
    if matches!(err, EtcdError::Decode { .. }) {
        return Err(refused(err));
    }
    eprintln!("weave serve: standby ({replica}): {doing}: {err}; trying again");
    Ok(())
}

/// The records written before this replica was elected, read again while etcd elects (for up
/// to ten seconds; the lease may lapse meanwhile, and the first write then finds it lost).
fn read_tail(log: &mut RecordLog, replica: &str) -> Result<Followed, ServeError> {
    let mut tries = 0;
    loop {
        match log.follow() {
            Ok(tail) => return Ok(tail),
            Err(err @ EtcdError::Decode { .. }) => return Err(refused(err)),
            Err(err) if tries == 50 => return Err(refused(err)),
            Err(err) => eprintln!("weave serve: elected ({replica}): reading the tail: {err}; trying again"),
        }
        tries += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Applies what a read of `log` brought to `plane`: a snapshot replaces the state so far, and
/// the records (the log's last ones) follow it.
fn apply(
    cfg: &ServerConfig,
    plane: &mut Plane,
    log: &RecordLog,
    read: Followed,
    prefix: &str,
) -> Result<(), ServeError> {
    if let Some((at, state)) = read.snapshot {
        *plane = configured_plane(cfg)
            .restore(&state)
            .map_err(|err| ServeError::Snapshot { at, message: format!("{prefix}/snapshot: {err}") })?;
    }
    let first = log.len() as usize - read.records.len();
    for (i, bytes) in read.records.iter().enumerate() {
        let index = first + i;
        let r: Record =
            serde_json::from_slice(bytes).map_err(|err| refused(format!("record {index} of {prefix}/log: {err}")))?;
        plane.apply(&r).map_err(|error| ServeError::Recovery { index, error })?;
    }
    Ok(())
}

/// The job tokens' secret, created once for every replica (by the first to find none).
fn job_tokens(etcd: &Etcd, prefix: &str) -> Result<JobTokens, ServeError> {
    let key = format!("{prefix}/job-token-key").into_bytes();
    let stored = match etcd.get(&key).map_err(refused)? {
        Some(kv) => kv.value,
        None => {
            use std::io::Read;
            let mut secret = [0u8; 32];
            std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut secret)).map_err(refused)?;
            let put = Op::Put { key: key.clone(), value: secret.to_vec(), lease: None };
            // Another replica may have created it meanwhile: theirs is kept, and read back.
            etcd.txn(&[Compare::Absent(key.clone())], &[put]).map_err(refused)?;
            etcd.get(&key).map_err(refused)?.map(|kv| kv.value).unwrap_or_default()
        }
    };
    let secret: [u8; 32] = stored.try_into().map_err(|_| refused(format!("{prefix}/job-token-key: not 32 bytes")))?;
    Ok(JobTokens::new(secret))
}

/// The placement the log was written under, kept beside it in etcd and checked as the
/// embedded store's file is (a log replayed under another placement would move its jobs).
/// With `empty`, a log without one may be replayed (and the placement recorded once it leads).
fn check_placement(etcd: &Etcd, prefix: &str, cfg: &ServerConfig, empty: bool) -> Result<(), ServeError> {
    let mode = placement_mode(cfg);
    let refuse = |message: String| ServeError::Placement { path: format!("{prefix}/placement"), message };
    match etcd.get(&placement_key(prefix)).map_err(refused)? {
        Some(kv) if kv.value == mode.as_bytes() => Ok(()),
        Some(kv) => Err(refuse(format!(
            "this log was written with `{}` placement; replaying it with `{mode}` would move its jobs",
            String::from_utf8_lossy(&kv.value)
        ))),
        None if empty || cfg.placement.chosen => Ok(()),
        None => Err(refuse("the log has records but no placement: start with --disagg-only or --consolidate".into())),
    }
}

/// Records the placement beside the log (the active replica, once its replay worked).
fn record_placement(etcd: &Etcd, prefix: &str, cfg: &ServerConfig) -> Result<(), ServeError> {
    let put = Op::Put { key: placement_key(prefix), value: placement_mode(cfg).as_bytes().to_vec(), lease: None };
    etcd.txn(&[Compare::Absent(placement_key(prefix))], &[put]).map_err(refused).map(|_| ())
}

fn placement_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}/placement").into_bytes()
}

fn placement_mode(cfg: &ServerConfig) -> &'static str {
    if cfg.placement.consolidate {
        "full-weave"
    } else {
        "disagg-only"
    }
}

/// What [`seed_from_store`] moved into etcd.
#[derive(Debug)]
pub struct Seeded {
    /// The snapshot's place (the state after this many records), if the store had one.
    pub snapshot_at: Option<u64>,
    pub snapshot_bytes: usize,
    /// Records after it.
    pub records: usize,
}

/// Moves an embedded store (a server's `--data`, the server stopped) into an empty prefix of
/// etcd: its newest snapshot, the records after it, its placement and its job tokens' secret,
/// so that replicas on etcd go on from where it was (`weave store to-etcd`). The store is
/// only read.
pub fn seed_from_store(data_dir: &std::path::Path, e: &EtcdConfig) -> Result<Seeded, ServeError> {
    let etcd = Etcd::new(&e.endpoints, Duration::from_secs(30)).map_err(refused)?;
    etcd.check().map_err(|err| refused(format!("{err}: start etcd first, or check --etcd")))?;
    let store = weave_store::Store::open(&data_dir.join("weave.redb"))?;
    let loaded = store.load_reporting::<Record>()?;
    let records: Vec<Vec<u8>> =
        loaded.records.iter().map(serde_json::to_vec).collect::<Result<_, _>>().map_err(refused)?;
    let (at, state) = loaded.snapshot.map_or((0, None), |(at, bytes)| (at, Some(bytes)));
    weave_etcd::snapshot::seed(&etcd, &e.prefix, at, state.as_deref(), &records).map_err(refused)?;
    let copy = |file: &str, key: &str| -> Result<(), ServeError> {
        match std::fs::read(data_dir.join(file)) {
            Ok(bytes) => {
                let text = if file == "placement" {
                    String::from_utf8_lossy(&bytes).trim().as_bytes().to_vec()
                } else {
                    bytes
                };
                etcd.put(format!("{}/{key}", e.prefix).as_bytes(), &text, None).map(|_| ()).map_err(refused)
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(refused(format!("{}: {err}", data_dir.join(file).display()))),
        }
    };
    copy("placement", "placement")?;
    copy("job-token.key", "job-token-key")?;
    Ok(Seeded {
        snapshot_at: state.as_ref().map(|_| at),
        snapshot_bytes: state.map_or(0, |s| s.len()),
        records: records.len(),
    })
}
