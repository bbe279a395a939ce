//! Weave's replicated record log on etcd (v3, through its JSON gateway: etcd 3.4 serves it on
//! the client port). [`Etcd`] is the small client the log needs: keys and prefix ranges,
//! transactions, leases. [`log::RecordLog`] keeps records in order, each write a transaction
//! that succeeds only while the writer holds the leadership key under its own lease
//! ([`log::Leadership`]): a writer deposed (its lease expired, another elected) can no longer
//! write, even before it notices.
//!
//! Every call goes to the endpoints in turn until one answers; what etcd refuses is an error
//! naming its reason. A write etcd answered has been committed by a quorum of its members.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

mod guard;
pub mod local;
pub mod log;
pub mod snapshot;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd unreachable at {endpoints}: {message}")]
    Unreachable { endpoints: String, message: String },
    #[error("etcd refused {call}: {message}")]
    Refused { call: &'static str, message: String },
    #[error("etcd answered {call} with what this client cannot read: {message}")]
    Decode { call: &'static str, message: String },
}

/// A key and its value, with the revisions etcd keeps of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// A condition of a transaction.
#[derive(Clone, Debug)]
pub enum Compare {
    /// The key does not exist.
    Absent(Vec<u8>),
    /// The key holds exactly this value.
    ValueIs(Vec<u8>, Vec<u8>),
}

/// What a transaction does.
#[derive(Clone, Debug)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: Option<i64>,
    },
    Delete(Vec<u8>),
    /// Every key in `[from, to)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

/// A client of one etcd cluster.
#[derive(Clone, Debug)]
pub struct Etcd {
    endpoints: Vec<String>,
    http: reqwest::blocking::Client,
    /// The endpoint that answered last, tried first (shared by clones): a member on a lost
    /// machine costs each call a connection timeout only until another answers once.
    preferred: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(call: &'static str, text: &str) -> Result<Vec<u8>, EtcdError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| EtcdError::Decode { call, message: e.to_string() })
}

/// etcd's 64-bit numbers travel as strings (absent: 0).
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

#[derive(Deserialize)]
struct RawKv {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    create_revision: Value,
    #[serde(default)]
    mod_revision: Value,
    #[serde(default)]
    lease: Value,
}

fn kvs(call: &'static str, v: &Value) -> Result<Vec<Kv>, EtcdError> {
    let raw: Vec<RawKv> = serde_json::from_value(v.get("kvs").cloned().unwrap_or(json!([])))
        .map_err(|e| EtcdError::Decode { call, message: e.to_string() })?;
    raw.into_iter()
        .map(|r| {
            Ok(Kv {
                key: unb64(call, &r.key)?,
                value: unb64(call, &r.value)?,
                create_revision: int(&r.create_revision),
                mod_revision: int(&r.mod_revision),
                lease: int(&r.lease),
            })
        })
        .collect()
}

/// The innermost reason of an error (a refused connection, a timeout), not the request's URL
/// again.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The first key after every key starting with `prefix` (etcd's `range_end` for a prefix).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Etcd {
    /// A client of the cluster at `endpoints` (`http://host:port`, tried in turn); each call
    /// gives up after `timeout`. Nothing is sent yet (see [`Etcd::check`]).
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd, EtcdError> {
        if endpoints.is_empty() {
            return Err(EtcdError::Unreachable { endpoints: String::new(), message: "no endpoint given".into() });
        }
        // A member whose machine is gone answers no connection at all: give up on it sooner
        // than on a slow answer.
        let http = reqwest::blocking::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_millis(500)))
            .build()
            .map_err(|e| EtcdError::Unreachable { endpoints: endpoints.join(","), message: e.to_string() })?;
        let endpoints = endpoints.iter().map(|e| e.trim_end_matches('/').to_string()).collect();
        Ok(Etcd { endpoints, http, preferred: Default::default() })
    }

    /// Whether the cluster answers a linearizable read (which needs a quorum).
    pub fn check(&self) -> Result<(), EtcdError> {
        self.range(b"\0", None, 1).map(|_| ())
    }

    fn call(&self, call: &'static str, path: &str, body: Value) -> Result<Value, EtcdError> {
        // Why each endpoint failed, all of them named in the error.
        let mut failed = Vec::new();
        let first = self.preferred.load(std::sync::atomic::Ordering::Relaxed);
        for i in (0..self.endpoints.len()).map(|k| (first + k) % self.endpoints.len()) {
            let e = &self.endpoints[i];
            let answer = match self.http.post(format!("{e}{path}")).json(&body).send() {
                Ok(a) => a,
                Err(err) => {
                    failed.push(format!("{e}: {}", root_cause(&err)));
                    continue;
                }
            };
            let ok = answer.status().is_success();
            let v: Value = answer.json().map_err(|err| EtcdError::Decode { call, message: err.to_string() })?;
            if let Some(message) = v.get("error").and_then(Value::as_str).filter(|_| !ok || v.get("code").is_some()) {
                // Without a leader (no quorum) a member answers so; another may have one.
                if ["no leader", "leader changed", "timed out", "unavailable"].iter().any(|m| message.contains(m)) {
                    failed.push(format!("{e}: {message}"));
                    continue;
                }
                return Err(EtcdError::Refused { call, message: message.to_string() });
            }
            self.preferred.store(i, std::sync::atomic::Ordering::Relaxed);
            return Ok(v);
        }
        Err(EtcdError::Unreachable { endpoints: self.endpoints.join(","), message: failed.join("; ") })
    }

    /// Up to `limit` keys from `key` (to `end`, exclusive; `None`: only `key`), in key order.
    pub fn range(&self, key: &[u8], end: Option<&[u8]>, limit: i64) -> Result<Vec<Kv>, EtcdError> {
        let mut body = json!({ "key": b64(key), "limit": limit.to_string() });
        if let Some(end) = end {
            body["range_end"] = b64(end).into();
        }
        let v = self.call("range", "/v3/kv/range", body)?;
        kvs("range", &v)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Kv>, EtcdError> {
        Ok(self.range(key, None, 1)?.into_iter().next())
    }

    /// Puts `value` at `key` (with `lease`, it goes when the lease does); the new revision.
    pub fn put(&self, key: &[u8], value: &[u8], lease: Option<i64>) -> Result<i64, EtcdError> {
        let mut body = json!({ "key": b64(key), "value": b64(value) });
        if let Some(l) = lease {
            body["lease"] = l.to_string().into();
        }
        let v = self.call("put", "/v3/kv/put", body)?;
        Ok(int(&v["header"]["revision"]))
    }

    /// Does `then` if every condition holds, else nothing; whether it did.
    pub fn txn(&self, when: &[Compare], then: &[Op]) -> Result<bool, EtcdError> {
        Ok(self.txn_revision(when, then)?.0)
    }

    /// [`Etcd::txn`], with the cluster's revision after it.
    pub fn txn_revision(&self, when: &[Compare], then: &[Op]) -> Result<(bool, i64), EtcdError> {
        let compare: Vec<Value> = when
            .iter()
            .map(|c| match c {
                Compare::Absent(k) => {
                    json!({ "key": b64(k), "target": "CREATE", "result": "EQUAL", "create_revision": "0" })
                }
                Compare::ValueIs(k, v) => {
                    json!({ "key": b64(k), "target": "VALUE", "result": "EQUAL", "value": b64(v) })
                }
            })
            .collect();
        let success: Vec<Value> = then
            .iter()
            .map(|op| match op {
                Op::Put { key, value, lease } => {
                    let mut put = json!({ "key": b64(key), "value": b64(value) });
                    if let Some(l) = lease {
                        put["lease"] = l.to_string().into();
                    }
                    json!({ "request_put": put })
                }
                Op::Delete(k) => json!({ "request_delete_range": { "key": b64(k) } }),
                Op::DeleteRange(from, to) => {
                    json!({ "request_delete_range": { "key": b64(from), "range_end": b64(to) } })
                }
            })
            .collect();
        let v = self.call("txn", "/v3/kv/txn", json!({ "compare": compare, "success": success }))?;
        let succeeded = v.get("succeeded").and_then(Value::as_bool).unwrap_or(false);
        Ok((succeeded, int(&v["header"]["revision"])))
    }

    /// Lets etcd forget every revision of its keys before `revision` (what deleted or replaced
    /// keys held: the space they took is reused).
    pub fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        self.call("compaction", "/v3/kv/compaction", json!({ "revision": revision.to_string() })).map(|_| ())
    }

    /// A lease of `ttl_s` seconds; its id.
    pub fn grant(&self, ttl_s: i64) -> Result<i64, EtcdError> {
        let v = self.call("lease grant", "/v3/lease/grant", json!({ "TTL": ttl_s }))?;
        match int(&v["ID"]) {
            0 => Err(EtcdError::Decode { call: "lease grant", message: format!("no lease id in {v}") }),
            id => Ok(id),
        }
    }

    /// Renews a lease; the seconds it has left (0: it has expired, its keys are gone).
    pub fn keep_alive(&self, lease: i64) -> Result<i64, EtcdError> {
        let v = self.call("lease keepalive", "/v3/lease/keepalive", json!({ "ID": lease.to_string() }))?;
        Ok(int(&v["result"]["TTL"]))
    }

    /// Ends a lease now (its keys go with it).
    pub fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call("lease revoke", "/v3/lease/revoke", json!({ "ID": lease.to_string() })).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_at_the_next_key_after_everything_under_it() {
        assert_eq!(prefix_end(b"/weave/log/"), b"/weave/log0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), vec![b'b']);
        assert_eq!(prefix_end(&[0xff, 0xff]), vec![0], "every key");
    }

    #[test]
    fn numbers_come_as_strings_or_numbers_and_absent_is_zero() {
        assert_eq!(int(&json!("7587899411503135498")), 7587899411503135498);
        assert_eq!(int(&json!(5)), 5);
        assert_eq!(int(&Value::Null), 0);
    }

    #[test]
    fn no_endpoint_is_refused_at_once() {
        assert!(matches!(Etcd::new(&[], Duration::from_secs(1)), Err(EtcdError::Unreachable { .. })));
    }
}
