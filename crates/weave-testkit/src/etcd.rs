//! Local etcd clusters for the tests ([`weave_etcd::local::LocalCluster`]): a missing `etcd`
//! binary fails the test naming it, as every tool an ignored test needs does.

pub use weave_etcd::local::LocalCluster as EtcdCluster;

/// `n` members for `test`, started; fails `test` naming what is missing.
pub fn cluster(test: &str, n: usize) -> EtcdCluster {
    crate::require(test, EtcdCluster::installed(), "the etcd binary (Debian: apt-get install etcd-server)");
    EtcdCluster::start(test, n).unwrap_or_else(|e| panic!("{test}: {e}"))
}
