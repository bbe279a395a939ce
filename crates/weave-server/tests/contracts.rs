//! The server's contracts with the outside hold together: every route in the table answers
//! and is documented, the document has nothing else, a submission's schema names exactly the
//! fields the server reads, and the Python client calls only documented routes.

mod common;

use common::*;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use weave_server::http::routes::{path_parameters, table};
use weave_server::plane::{ServerFields, SubmitSpec};
use weave_trace::fields::field_names;
use weave_trace::JobFields;

/// A concrete path for a route's template.
fn concrete(path: &str) -> String {
    let mut out = path.to_string();
    for name in path_parameters(path) {
        let value = match name {
            "phase" => "rollout",
            "iteration" => "0",
            "node" => "r0",
            _ => "nobody",
        };
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

#[test]
fn every_route_in_the_table_answers_and_is_documented_and_nothing_else_is() {
    let s = TestServer::start(temp_dir("contracts"), Duration::from_secs(60));
    let c = client();
    let (_, doc) = body(c.get(s.url("/openapi.json")).send().unwrap());
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let mut answered = BTreeSet::new();
    for r in table() {
        let url = s.url(&concrete(r.path));
        let req = c.request(r.method.clone(), &url).bearer_auth(OPS);
        let req = if r.method == reqwest::Method::POST { req.json(&json!({})) } else { req };
        let resp = req.send().unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        // The router's own refusals say where to look; a handler's 404 names what is missing.
        assert!(
            !text.contains("see /openapi.json"),
            "{} {}: the router does not answer it: {status} {text}",
            r.method,
            r.path
        );
        assert!(status != 405, "{} {}: {text}", r.method, r.path);
        answered.insert((r.method.to_string(), r.path.to_string()));
    }
    assert_eq!(answered, documented, "the document lists exactly the table's routes");
    for must in [("GET", "/readyz"), ("POST", "/v1/nodes/{node}/notice")] {
        assert!(documented.contains(&(must.0.to_string(), must.1.to_string())), "{must:?} undocumented");
    }
    // A path the table does not have is the router's refusal, in JSON.
    let r = c.get(s.url("/v1/nothing-here")).bearer_auth(OPS).send().unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn the_submission_schema_names_exactly_the_fields_a_submission_reads() {
    let doc = weave_server::http::openapi::document();
    let documented: BTreeSet<String> =
        doc["components"]["schemas"]["SubmitSpec"]["properties"].as_object().unwrap().keys().cloned().collect();
    let mut read: BTreeSet<String> = ["id".to_string()].into();
    read.extend(field_names::<JobFields>().iter().map(|s| s.to_string()));
    read.extend(field_names::<ServerFields>().iter().map(|s| s.to_string()));
    assert_eq!(documented, read);
    // Each documented field is taken (not refused as unknown), and nothing else is.
    for field in &documented {
        let mut v = json!({ "id": "a" });
        v[field] = json!(null);
        let taken = serde_json::from_value::<SubmitSpec>(v);
        assert!(taken.as_ref().err().is_none_or(|e| !e.to_string().contains("unknown field")), "{field}: {taken:?}");
    }
    let e = serde_json::from_value::<SubmitSpec>(json!({ "id": "a", "colour": 1 })).unwrap_err();
    assert!(e.to_string().contains("unknown field `colour`"), "{e}");
    // The staleness bound is the core's, not a copy.
    assert_eq!(
        doc["components"]["schemas"]["SubmitSpec"]["properties"]["staleness"]["maximum"],
        weave_core::MAX_STALENESS
    );
}

/// `(method, path)` of every server path the Python client names, read from its source: the
/// method where the line is a `_request("METHOD", "...")` call, `None` where the path is
/// assigned to a variable a request uses later.
fn python_client_calls() -> Vec<(Option<String>, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "py") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weave_client"), &mut files);
    let mut calls = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let Some(start) = line.find("\"/") else { continue };
            let rest = &line[start + 1..];
            let Some(end) = rest.find('"') else { continue };
            let literal = rest[..end].split('?').next().unwrap().to_string();
            let server = ["/v1/", "/healthz", "/readyz", "/metrics", "/status", "/openapi.json"];
            if !server.iter().any(|p| literal.starts_with(p)) && literal != "/v1/jobs" {
                continue;
            }
            let method = ["GET", "POST", "DELETE", "PUT", "PATCH"]
                .into_iter()
                .find(|m| line[..start].contains(&format!("\"{m}\"")))
                .map(str::to_string);
            calls.push((method, literal));
        }
    }
    calls
}

/// Whether a concrete or f-string path (`/v1/jobs/{job_id}`) fits a route's template.
fn fits(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(a, b)| a == b || (a.starts_with('{') && !b.is_empty()))
}

#[test]
fn the_python_client_calls_only_documented_routes() {
    let calls = python_client_calls();
    assert!(calls.len() >= 12, "the client's calls were not found: {calls:?}");
    let routes = table();
    for (method, path) in &calls {
        let known = routes.iter().any(|r| fits(r.path, path) && method.as_ref().is_none_or(|m| r.method.as_str() == m));
        assert!(known, "the Python client calls {method:?} {path}, which no route answers");
    }
    assert!(!fits("/v1/jobs/{id}", "/v1/jobs/{id}/heartbeat"), "the matcher compares whole paths");
}
