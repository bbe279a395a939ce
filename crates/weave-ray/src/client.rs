//! A small blocking client for the two Ray HTTP APIs Weave uses, both served by the Ray
//! dashboard: the State API (`/api/v0/nodes`) and the Job Submission API (`/api/jobs/`).

use crate::inventory::{Inventory, InventoryError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RayError {
    #[error("Ray at {url}: {message}")]
    Http { url: String, message: String },
    #[error("Ray at {url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("Ray at {url}: {source}")]
    Inventory { url: String, source: InventoryError },
}

/// One job as Ray's Job API lists it (only the fields Weave reads).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct RayJob {
    #[serde(default)]
    pub submission_id: Option<String>,
    #[serde(default)]
    pub job_id: Option<String>,
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

pub struct RayClient {
    base: String,
    http: reqwest::blocking::Client,
}

impl RayClient {
    /// `address`: the dashboard's HTTP address, e.g. `http://127.0.0.2:8265`.
    pub fn new(address: &str) -> Result<RayClient, RayError> {
        let base = if address.contains("://") { address.to_string() } else { format!("http://{address}") };
        let base = base.trim_end_matches('/').to_string();
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| RayError::Http { url: base.clone(), message: e.to_string() })?;
        Ok(RayClient { base, http })
    }

    pub fn address(&self) -> &str {
        &self.base
    }

    fn send(&self, req: reqwest::blocking::RequestBuilder, url: &str) -> Result<serde_json::Value, RayError> {
        let http = |e: reqwest::Error| RayError::Http { url: url.to_string(), message: e.to_string() };
        let resp = req.send().map_err(http)?;
        let status = resp.status();
        let text = resp.text().map_err(http)?;
        if !status.is_success() {
            return Err(RayError::Status { url: url.to_string(), status: status.as_u16(), body: text });
        }
        if text.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| RayError::Http { url: url.to_string(), message: format!("invalid JSON: {e}") })
    }

    /// Weave's inventory from the State API.
    /// The inventory once Ray answers: retried every half second for `patience` while it
    /// does not (a cluster still starting); a malformed answer is not retried.
    pub fn inventory_when_up(&self, patience: std::time::Duration) -> Result<Inventory, RayError> {
        let deadline = std::time::Instant::now() + patience;
        loop {
            match self.inventory() {
                Ok(inv) => return Ok(inv),
                Err(e @ RayError::Inventory { .. }) => return Err(e),
                Err(e) if std::time::Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(500)),
            }
        }
    }

    pub fn inventory(&self) -> Result<Inventory, RayError> {
        let url = format!("{}/api/v0/nodes?limit=10000&detail=true", self.base);
        let body = self.send(self.http.get(&url), &url)?;
        Inventory::from_state_api(&body).map_err(|source| RayError::Inventory { url, source })
    }

    /// Every job Ray knows.
    pub fn jobs(&self) -> Result<Vec<RayJob>, RayError> {
        let url = format!("{}/api/jobs/", self.base);
        let body = self.send(self.http.get(&url), &url)?;
        serde_json::from_value(body).map_err(|e| RayError::Http { url, message: format!("unexpected job list: {e}") })
    }

    /// Submits a job (`body` as [`crate::launch::submission_body`] builds it).
    pub fn submit(&self, body: &serde_json::Value) -> Result<(), RayError> {
        let url = format!("{}/api/jobs/", self.base);
        self.send(self.http.post(&url).json(body), &url).map(|_| ())
    }

    pub fn stop(&self, submission_id: &str) -> Result<(), RayError> {
        let url = format!("{}/api/jobs/{submission_id}/stop", self.base);
        self.send(self.http.post(&url), &url).map(|_| ())
    }
}
