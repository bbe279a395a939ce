//! Records in order in etcd, written only by the leader.
//!
//! Record `n` lives at `<prefix>/log/<n, 20 digits>` (key order is record order). An append is
//! one transaction: *no record `n` yet* and *the leadership key holds my campaign* (my id and
//! my lease), then put record `n`. So a record is never written twice, never out of order,
//! and never by a writer that has lost its leadership: when its lease expires etcd deletes
//! the key, and from then on every transaction of the old leader fails, whether or not it has
//! noticed yet. etcd answers a transaction once a quorum of its members has committed it: an
//! acknowledged record survives the loss of any minority of them.

pub use crate::guard::{leader, AppendError, LeaderGuard};
use crate::guard::{leader_key, record_key};
use crate::snapshot::{self, Manifest};
use crate::{prefix_end, Compare, Etcd, EtcdError, Op};

/// Keys read per request when a log is loaded or followed.
const PAGE: i64 = 1_000;

/// The leadership of `<prefix>/leader`, held under a lease.
#[derive(Debug)]
pub struct Leadership {
    etcd: Etcd,
    key: Vec<u8>,
    /// What the key holds while this campaign leads: the id and the lease, so a restarted
    /// process with the same id is another campaign.
    campaign: Vec<u8>,
    lease: i64,
    prefix: String,
}

impl Leadership {
    /// Campaigns once for `<prefix>/leader` as `id`, with a lease of `ttl_s` seconds: the
    /// leadership if nobody holds it, else `Err` with the holder's id.
    pub fn campaign(etcd: &Etcd, prefix: &str, id: &str, ttl_s: i64) -> Result<Result<Leadership, String>, EtcdError> {
        let lease = etcd.grant(ttl_s)?;
        let key = leader_key(prefix);
        let campaign = format!("{id}#{lease}").into_bytes();
        let put = Op::Put { key: key.clone(), value: campaign.clone(), lease: Some(lease) };
        if etcd.txn(&[Compare::Absent(key.clone())], &[put])? {
            return Ok(Ok(Leadership { etcd: etcd.clone(), key, campaign, lease, prefix: prefix.to_string() }));
        }
        // Lost: the lease would only expire; give it back now.
        let _ = etcd.revoke(lease);
        Ok(Err(leader(etcd, prefix)?.unwrap_or_default()))
    }

    /// Renews the lease (call well within its TTL); false once it has expired: the leadership
    /// is lost and every append fails.
    pub fn renew(&self) -> Result<bool, EtcdError> {
        Ok(self.etcd.keep_alive(self.lease)? > 0)
    }

    /// The lease the leadership is held under.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// Gives the leadership up at once (the next campaign need not wait for the lease).
    pub fn resign(self) -> Result<(), EtcdError> {
        self.etcd.revoke(self.lease)
    }

    /// What writes made elsewhere need to be conditional on this leadership.
    pub fn guard(&self) -> LeaderGuard {
        LeaderGuard { key: self.key.clone(), campaign: self.campaign.clone(), prefix: self.prefix.clone() }
    }
}

/// A log of records in etcd: where the next one goes.
#[derive(Debug)]
pub struct RecordLog {
    etcd: Etcd,
    prefix: String,
    next: u64,
    /// Records the newest snapshot this log read or wrote covers.
    base: u64,
}

/// What a read of the log brings: the records after what was read before, or, when those were
/// let go under a newer snapshot, that snapshot and the records after it.
#[derive(Debug, Default)]
pub struct Followed {
    /// The state after `.0` records, to start from instead of the state so far.
    pub snapshot: Option<(u64, Vec<u8>)>,
    pub records: Vec<Vec<u8>>,
}

impl RecordLog {
    /// Opens the log under `prefix` and reads it: the newest snapshot, if any, and every
    /// record after it, in order.
    pub fn open(etcd: Etcd, prefix: &str) -> Result<(RecordLog, Followed), EtcdError> {
        let mut log = RecordLog { etcd, prefix: prefix.trim_end_matches('/').to_string(), next: 0, base: 0 };
        let read = log.follow()?;
        Ok((log, read))
    }

    /// Records the newest snapshot covers (the state it opened from, or the last one written).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Counts a snapshot written of the state after `at` records.
    pub fn snapshot_written(&mut self, at: u64) {
        self.base = self.base.max(at);
    }

    /// Where its keys live.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Records in the log.
    pub fn len(&self) -> u64 {
        self.next
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }

    fn key(&self, n: u64) -> Vec<u8> {
        record_key(&self.prefix, n)
    }

    /// Appends `record` as record `len()` if `leader` still leads; its number once etcd has
    /// committed it.
    pub fn append(&mut self, leader: &Leadership, record: &[u8]) -> Result<u64, AppendError> {
        let n = self.next;
        let put = Op::Put { key: self.key(n), value: record.to_vec(), lease: None };
        let guard = leader.guard();
        if self.etcd.txn(&[Compare::Absent(self.key(n)), guard.holds()], &[put])? {
            self.next += 1;
            return Ok(n);
        }
        // A call that timed out may have been committed all the same and then sent again to
        // another member, whose compare then fails on it: record `n` holding exactly this,
        // while this campaign still leads, is this write.
        let mine = [guard.holds(), Compare::ValueIs(self.key(n), record.to_vec())];
        if self.etcd.txn(&mine, &[])? {
            self.next += 1;
            return Ok(n);
        }
        Err(guard.deposed(&self.etcd))
    }

    /// What was written since this log last read or wrote (a standby following the leader),
    /// in order, counted as read: the records after it, or a newer snapshot and the records
    /// after that where the leader has let go of the ones this log had not read.
    pub fn follow(&mut self) -> Result<Followed, EtcdError> {
        if let Some(records) = self.read_on()? {
            return Ok(Followed { snapshot: None, records });
        }
        for _ in 0..5 {
            let Some((m, state)) = snapshot::load(&self.etcd, &self.prefix)? else { break };
            (self.next, self.base) = (m.at, m.at);
            if let Some(records) = self.read_on()? {
                return Ok(Followed { snapshot: Some((m.at, state)), records });
            }
        }
        let message =
            format!("{}: records before a snapshot are missing, and no newer snapshot covers them", self.prefix);
        Err(EtcdError::Decode { call: "log range", message })
    }

    /// The records from `next` on; `None` (nothing counted as read) when they were let go
    /// under a snapshot past `next`.
    fn read_on(&mut self) -> Result<Option<Vec<Vec<u8>>>, EtcdError> {
        let end = prefix_end(format!("{}/log/", self.prefix).as_bytes());
        let (start, mut out) = (self.next, Vec::new());
        loop {
            // Bounded to the page's own keys: etcd counts every key in a range it is asked
            // for, whatever the limit, so an open-ended range per page made reading a long
            // tail quadratic (99,000 records took 3.8 s to read).
            let page_end = self.key(self.next + PAGE as u64).min(end.clone());
            let page = self.etcd.range(&self.key(self.next), Some(&page_end), PAGE)?;
            let full = page.len() as i64 == PAGE;
            // The snapshot that lets records go deletes them in the same transaction that
            // names it: a gap here (or nothing at all) with a snapshot past `next` means
            // they went under it.
            if page.first().is_none_or(|kv| kv.key != self.key(self.next)) && self.snapshot_past(self.next)? {
                self.next = start;
                return Ok(None);
            }
            for kv in page {
                let expected = self.key(self.next);
                if kv.key != expected {
                    let message = format!("expected {}, found {}", lossy(&expected), lossy(&kv.key));
                    return Err(EtcdError::Decode { call: "log range", message });
                }
                out.push(kv.value);
                self.next += 1;
            }
            if !full {
                return Ok(Some(out));
            }
        }
    }

    fn snapshot_past(&self, n: u64) -> Result<bool, EtcdError> {
        Ok(snapshot::manifest(&self.etcd, &self.prefix)?.is_some_and(|m: Manifest| m.at > n))
    }
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// A standby's report of how far it has followed the log: `<prefix>/replicas/<name>` holds the
/// records it has applied, under a lease of its own, so the entry goes when the standby does.
#[derive(Debug)]
pub struct Presence {
    etcd: Etcd,
    key: Vec<u8>,
    lease: i64,
}

fn replicas_prefix(prefix: &str) -> String {
    format!("{prefix}/replicas/")
}

impl Presence {
    /// Announces replica `name` (its entry lives `ttl_s` seconds past its last report).
    pub fn announce(etcd: &Etcd, prefix: &str, name: &str, ttl_s: i64) -> Result<Presence, EtcdError> {
        let lease = etcd.grant(ttl_s)?;
        Ok(Presence { etcd: etcd.clone(), key: format!("{}{name}", replicas_prefix(prefix)).into_bytes(), lease })
    }

    /// Reports `applied` records (and keeps the entry alive).
    pub fn report(&mut self, applied: u64) -> Result<(), EtcdError> {
        if self.etcd.keep_alive(self.lease)? == 0 {
            // Expired while etcd was away: a new lease.
            self.lease = self.etcd.grant(5)?;
        }
        self.etcd.put(&self.key, applied.to_string().as_bytes(), Some(self.lease)).map(|_| ())
    }

    /// Removes the entry now (the replica leads, or stops).
    pub fn withdraw(self) -> Result<(), EtcdError> {
        self.etcd.revoke(self.lease)
    }
}

/// The standbys that reported, with the records each has applied, by name.
pub fn standbys(etcd: &Etcd, prefix: &str) -> Result<Vec<(String, u64)>, EtcdError> {
    let start = replicas_prefix(prefix);
    let kvs = etcd.range(start.as_bytes(), Some(&prefix_end(start.as_bytes())), 1_000)?;
    Ok(kvs
        .into_iter()
        .map(|kv| {
            let name = String::from_utf8_lossy(&kv.key[start.len()..]).into_owned();
            (name, String::from_utf8_lossy(&kv.value).parse().unwrap_or(0))
        })
        .collect())
}
