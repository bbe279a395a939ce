//! Lists of jobs: the queue, and the caller's jobs page by page.

use super::{caller, ApiResult};
use crate::state::Shared;
use crate::views::{job_page, queued_views, JobView, JOBS_PAGE, JOBS_PAGE_MAX};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

/// The jobs waiting for room, in the order they will start (the caller's own only, unless
/// it is an admin).
pub(super) async fn queue(State(s): State<Arc<Shared>>, headers: HeaderMap) -> ApiResult<Json<Vec<JobView>>> {
    let c = caller(&s, &headers)?;
    let now_us = s.now_us();
    let g = s.lock();
    Ok(Json(queued_views(&g.plane, now_us, &c)))
}

/// One page of the caller's jobs (`?limit=N`, at most [`JOBS_PAGE_MAX`], else [`JOBS_PAGE`]),
/// in key order; when more follow, a `Link: <...>; rel="next"` header names the next page.
pub(super) async fn list_jobs(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(q): Query<JobsQuery>,
) -> ApiResult<impl IntoResponse> {
    let c = caller(&s, &headers)?;
    let limit = q.limit.unwrap_or(JOBS_PAGE).clamp(1, JOBS_PAGE_MAX);
    // Views are built under the lock (one page's worth); the response is serialized after.
    let now_us = s.now_us();
    // A page is built off the lock and off the async workers, from a frozen copy of the plane
    // (persistent collections: taking it copies a few pointers).
    let frozen = s.lock().plane.clone();
    let (jobs, next) = super::off_the_workers(move || {
        let page = job_page(&frozen, now_us, &c, q.after.as_deref(), limit);
        crate::drop_elsewhere(frozen);
        page
    })
    .await?;
    let mut headers = HeaderMap::new();
    if let Some(key) = next {
        let link = format!("</v1/jobs?after={}&limit={limit}>; rel=\"next\"", percent_encoded(&key));
        // Percent-encoded, the value is plain ASCII and always a valid header.
        if let Ok(v) = axum::http::HeaderValue::try_from(link) {
            headers.insert(axum::http::header::LINK, v);
        }
    }
    Ok((headers, Json(jobs)))
}

/// `s` for a URL's query: unreserved characters as they are, every other byte as `%XX`.
fn percent_encoded(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
pub(super) struct JobsQuery {
    /// Only jobs after this key (a cursor: taken from the previous page's `Link` header).
    after: Option<String>,
    limit: Option<usize>,
}

/// The path of the next page a list answer's `Link` header names (`<PATH>; rel="next"`), if
/// any: what a client follows to read a whole list.
pub fn next_page(link: Option<&str>) -> Option<&str> {
    let link = link?;
    link.contains("rel=\"next\"").then_some(())?;
    link.strip_prefix('<')?.split_once('>').map(|(path, _)| path)
}

/// Of several replicas' addresses (`weave serve --etcd`, comma-separated), the first `serves`
/// says serves (its `/healthz` answers 200; a standby's 503); the first address when none does,
/// so that its error is the one a client reports. A single address is not probed.
pub fn serving_replica(servers: &str, serves: impl Fn(&str) -> bool) -> String {
    let all: Vec<&str> = servers.split(',').map(|s| s.trim().trim_end_matches('/')).filter(|s| !s.is_empty()).collect();
    let pick = if all.len() > 1 { all.iter().find(|s| serves(s)) } else { None };
    pick.or(all.first()).map_or(servers.to_string(), |s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_what_the_link_header_names() {
        let link = format!("</v1/jobs?after={}&limit=2>; rel=\"next\"", percent_encoded("a b~c/d"));
        assert_eq!(next_page(Some(&link)), Some("/v1/jobs?after=a%20b~c%2Fd&limit=2"));
        assert_eq!(next_page(Some("</x>; rel=\"prev\"")), None);
        assert_eq!(next_page(None), None);
    }

    #[test]
    fn the_first_replica_that_serves_is_used_and_one_address_is_not_probed() {
        use super::serving_replica;
        assert_eq!(serving_replica("http://a, http://b/,http://c", |s| s == "http://b" || s == "http://c"), "http://b");
        assert_eq!(serving_replica("http://a,http://b", |_| false), "http://a", "none serves: the first's error");
        assert_eq!(serving_replica("http://only", |_| panic!("probed")), "http://only");
    }
}
