//! The record log against real etcd processes (the `etcd` binary: Debian's `etcd-server`):
//! order and exactly-once across reopening, a deposed leader's writes refused, quorum lost and
//! regained. Ignored without etcd; `.ci/run` installs it and runs them.

use std::time::{Duration, Instant};
use weave_etcd::log::{leader, AppendError, Leadership, RecordLog};
use weave_etcd::snapshot;
use weave_etcd::{Etcd, EtcdError};
use weave_testkit::etcd::EtcdCluster;

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A local cluster of `n` members, answering.
fn cluster(test: &str, n: usize) -> EtcdCluster {
    let c = weave_testkit::etcd::cluster(test, n);
    let etcd = client(&c);
    wait("the cluster to answer", || etcd.check().is_ok());
    c
}

fn client(c: &EtcdCluster) -> Etcd {
    Etcd::new(&c.endpoints(), Duration::from_secs(2)).unwrap()
}

/// Polls `ready` for up to a minute (a bound on a hang on a loaded machine, not a timing).
fn wait(what: &str, mut ready: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lead(etcd: &Etcd, id: &str, ttl_s: i64) -> Leadership {
    Leadership::campaign(etcd, "/weave", id, ttl_s).unwrap().unwrap_or_else(|h| panic!("{id} lost to {h}"))
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn records_come_back_in_order_once_and_a_follower_sees_new_ones() {
    let c = cluster("order", 1);
    let etcd = client(&c);
    let a = lead(&etcd, "a", 10);
    let (mut log, old) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert!(old.records.is_empty() && old.snapshot.is_none());
    let (mut follower, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    // More than a page, so that reading pages on is tested.
    for n in 0..1_203u64 {
        assert_eq!(log.append(&a, format!("record {n}").as_bytes()).unwrap(), n);
    }
    let (_, all) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    let expected: Vec<Vec<u8>> = (0..1_203).map(|n| format!("record {n}").into_bytes()).collect();
    assert_eq!(all.records, expected);
    assert_eq!(follower.follow().unwrap().records, expected);
    log.append(&a, b"one more").unwrap();
    assert_eq!(follower.follow().unwrap().records, vec![b"one more".to_vec()], "only what is new");
    assert_eq!(follower.len(), 1_204);
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn a_deposed_leader_cannot_write_even_before_it_notices() {
    let c = cluster("deposed", 1);
    let etcd = client(&c);
    let a = lead(&etcd, "a", 2);
    match Leadership::campaign(&etcd, "/weave", "b", 2).unwrap() {
        Err(holder) => assert_eq!(holder, "a"),
        Ok(_) => panic!("two leaders at once"),
    }
    let (mut log_a, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    log_a.append(&a, b"a0").unwrap();
    log_a.append(&a, b"a1").unwrap();
    // a stops renewing (paused, partitioned): its lease runs out and b is elected.
    let mut b = None;
    wait("b to be elected once a's lease expired", || {
        b = Leadership::campaign(&etcd, "/weave", "b", 10).unwrap().ok();
        b.is_some()
    });
    let b = b.unwrap();
    assert_eq!(leader(&etcd, "/weave").unwrap().as_deref(), Some("b"));
    let (mut log_b, seen) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert_eq!(seen.records, vec![b"a0".to_vec(), b"a1".to_vec()]);
    log_b.append(&b, b"b2").unwrap();
    // a has not noticed; its next write is refused all the same.
    match log_a.append(&a, b"a-late") {
        Err(AppendError::Deposed { holder }) => assert!(holder.contains('b'), "{holder}"),
        other => panic!("a deposed leader wrote: {other:?}"),
    }
    assert!(!a.renew().unwrap(), "its lease is gone");
    let (_, all) = RecordLog::open(etcd, "/weave").unwrap();
    assert_eq!(all.records, vec![b"a0".to_vec(), b"a1".to_vec(), b"b2".to_vec()]);
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn without_quorum_nothing_is_written_and_service_resumes_with_it() {
    let mut c = cluster("quorum", 3);
    let etcd = client(&c);
    let a = lead(&etcd, "a", 30);
    let (mut log, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    log.append(&a, b"before").unwrap();
    c.kill(1);
    c.kill(2);
    match log.append(&a, b"lost") {
        Err(AppendError::Etcd(e)) => eprintln!("without quorum: {e}"),
        other => panic!("written without a quorum: {other:?}"),
    }
    c.run(1).unwrap();
    c.run(2).unwrap();
    wait("quorum back", || etcd.check().is_ok());
    // The leader's lease may or may not have outlived the outage: it renews or campaigns.
    let a = if a.renew().unwrap_or(false) { a } else { lead(&etcd, "a", 30) };
    assert_eq!(log.append(&a, b"after").unwrap(), 1, "the refused record took no number");
    let (_, all) = RecordLog::open(etcd, "/weave").unwrap();
    assert_eq!(all.records, vec![b"before".to_vec(), b"after".to_vec()]);
}

fn records(range: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    range.map(|n| format!("record {n}").into_bytes()).collect()
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn a_snapshot_lets_records_go_and_a_reader_behind_it_starts_from_it() {
    let c = cluster("snapshot", 1);
    let etcd = client(&c);
    let a = lead(&etcd, "a", 10);
    let (mut log, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    let (mut behind, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    let (mut close, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    for r in records(0..10) {
        log.append(&a, &r).unwrap();
    }
    assert_eq!(close.follow().unwrap().records, records(0..10));
    // Three and a half parts, so that parts are joined in order.
    let state: Vec<u8> = (0..snapshot::PART_BYTES * 7 / 2).map(|i| (i % 251) as u8).collect();
    assert_eq!(snapshot::write(&etcd, "/weave", &a.guard(), 10, &state).unwrap(), 10, "records let go");
    log.snapshot_written(10);
    let (_, from_start) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert_eq!(from_start.snapshot, Some((10, state.clone())), "a new reader starts from the snapshot");
    assert!(from_start.records.is_empty());
    // Nothing written after the snapshot yet: the reader behind it still learns of it.
    let read = behind.follow().unwrap();
    assert_eq!(read.snapshot.as_ref().map(|(at, _)| *at), Some(10));
    for r in records(10..13) {
        log.append(&a, &r).unwrap();
    }
    assert_eq!(behind.follow().unwrap().records, records(10..13));
    let read = close.follow().unwrap();
    assert!(read.snapshot.is_none(), "a reader past the snapshot reads records only");
    assert_eq!(read.records, records(10..13));
    // A second snapshot replaces the first; the old parts go.
    assert_eq!(snapshot::write(&etcd, "/weave", &a.guard(), 13, b"small").unwrap(), 3);
    let (reopened, read) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert_eq!((read.snapshot, reopened.len(), reopened.base()), (Some((13, b"small".to_vec())), 13, 13));
    let old = etcd.range(b"/weave/snapshots/", Some(b"/weave/snapshots0"), 100).unwrap();
    assert_eq!(old.len(), 1, "only the newest snapshot's part is kept");
    assert!(etcd.get(b"/weave/log/00000000000000000012").unwrap().is_none(), "records before it are gone");
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn a_deposed_leaders_snapshot_changes_nothing() {
    let c = cluster("snapshot-deposed", 1);
    let etcd = client(&c);
    let a = lead(&etcd, "a", 2);
    let (mut log, _) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    for r in records(0..4) {
        log.append(&a, &r).unwrap();
    }
    let guard = a.guard();
    // a stops renewing; b is elected once a's lease has run out.
    let mut b = None;
    wait("b to be elected", || {
        b = Leadership::campaign(&etcd, "/weave", "b", 10).unwrap().ok();
        b.is_some()
    });
    match snapshot::write(&etcd, "/weave", &guard, 4, b"state") {
        Err(AppendError::Deposed { holder }) => assert!(holder.contains('b'), "{holder}"),
        other => panic!("a deposed leader wrote a snapshot: {other:?}"),
    }
    let (_, read) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert_eq!((read.snapshot, read.records), (None, records(0..4)), "the records stay, no snapshot");
}

#[test]
#[ignore = "needs etcd: .ci/run installs it and runs this with --ignored"]
fn seeding_writes_a_state_and_its_records_only_where_nothing_is() {
    let c = cluster("seed", 1);
    let etcd = client(&c);
    snapshot::seed(&etcd, "/weave", 500, Some(b"state"), &records(500..750)).unwrap();
    let (log, read) = RecordLog::open(etcd.clone(), "/weave").unwrap();
    assert_eq!((read.snapshot, read.records, log.len()), (Some((500, b"state".to_vec())), records(500..750), 750));
    match snapshot::seed(&etcd, "/weave", 0, None, &records(0..1)) {
        Err(EtcdError::Refused { message, .. }) => assert!(message.contains("not empty"), "{message}"),
        other => panic!("seeded over a log: {other:?}"),
    }
}

#[test]
fn an_unreachable_cluster_is_an_error_naming_its_endpoints() {
    let dead = format!("http://127.0.0.1:{}", port());
    let etcd = Etcd::new(std::slice::from_ref(&dead), Duration::from_secs(1)).unwrap();
    match etcd.check() {
        Err(EtcdError::Unreachable { endpoints, .. }) => assert_eq!(endpoints, dead),
        other => panic!("{other:?}"),
    }
}
