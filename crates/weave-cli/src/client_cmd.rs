//! `weave job ...` and `weave group list`: a client for `weave serve`.

use crate::input::{json, write_output};
use crate::table;
use anyhow::{bail, Context, Result};
use reqwest::blocking::{Client, RequestBuilder, Response};
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
pub struct Conn {
    /// Server address (replicas: their addresses, comma-separated; the one that serves is used).
    #[arg(long, env = "WEAVE_SERVER", default_value = "http://127.0.0.1:7070")]
    server: String,
    #[arg(skip)]
    serving: std::sync::OnceLock<String>,
    /// Bearer token.
    #[arg(long, env = "WEAVE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
pub enum JobCommand {
    /// Submit a job: a JSON spec file (the trace format without arrival), or flags.
    Submit {
        #[command(flatten)]
        conn: Conn,
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        #[arg(long)]
        id: Option<String>,
        /// Job type, e.g. 7B_8k.
        #[arg(long = "type")]
        job_type: Option<String>,
        #[arg(long)]
        iterations: Option<u64>,
        #[arg(long)]
        slo: Option<f64>,
        /// Have the execution backend (Ray) launch the job with this command.
        #[arg(long, value_name = "CMD")]
        entrypoint: Option<String>,
        /// Environment for the launched job, NAME=VALUE (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE", requires = "entrypoint")]
        envs: Vec<String>,
    },
    /// List jobs.
    List {
        #[command(flatten)]
        conn: Conn,
    },
    /// Show one job and its history.
    Show {
        #[command(flatten)]
        conn: Conn,
        id: String,
    },
    /// Cancel a job.
    Cancel {
        #[command(flatten)]
        conn: Conn,
        id: String,
    },
}

#[derive(clap::Subcommand)]
pub enum GroupListCommand {
    /// List groups, their nodes and members.
    List {
        #[command(flatten)]
        conn: Conn,
    },
}

fn send(conn: &Conn, req: RequestBuilder) -> Result<serde_json::Value> {
    send_for_page(conn, req).map(|(body, _)| body)
}

/// [`send`], with the next page a list answer names in its `Link` header.
fn send_for_page(conn: &Conn, req: RequestBuilder) -> Result<(serde_json::Value, Option<String>)> {
    let req = match &conn.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    };
    let resp: Response = req.send().with_context(|| format!("cannot reach {}", conn.server))?;
    let status = resp.status();
    let link = resp.headers().get(reqwest::header::LINK).and_then(|v| v.to_str().ok()).map(String::from);
    let body: serde_json::Value = resp.json().unwrap_or(serde_json::Value::Null);
    if !status.is_success() {
        let msg = body.get("error").and_then(|e| e.as_str()).unwrap_or("(no message)");
        bail!("server answered {status}: {msg}");
    }
    Ok((body, weave_server::http::next_page(link.as_deref()).map(String::from)))
}

/// Every item of a list the server answers page by page (the next named in `Link`).
fn all_pages(c: &Client, conn: &Conn, first: &str) -> Result<serde_json::Value> {
    let mut items = Vec::new();
    let mut path = Some(first.to_string());
    while let Some(p) = path {
        let (body, next) = send_for_page(conn, c.get(url(conn, &p)))?;
        items.extend(body.as_array().cloned().unwrap_or_default());
        path = next;
    }
    Ok(serde_json::Value::Array(items))
}

fn client() -> Result<Client> {
    Client::builder().build().context("cannot build the HTTP client")
}

fn url(conn: &Conn, path: &str) -> String {
    format!("{}{path}", conn.serving.get_or_init(|| serving(&conn.server)))
}

/// The replica that serves, of those given (its `/healthz` answers 200; a standby's 503).
fn serving(servers: &str) -> String {
    let c = Client::builder().timeout(std::time::Duration::from_secs(5)).build();
    let healthy =
        |s: &str| c.as_ref().is_ok_and(|c| c.get(format!("{s}/healthz")).send().is_ok_and(|r| r.status() == 200));
    weave_server::http::serving_replica(servers, healthy)
}

pub fn job(cmd: JobCommand) -> Result<()> {
    let c = client()?;
    match cmd {
        JobCommand::Submit { conn, file, id, job_type, iterations, slo, entrypoint, envs } => {
            let body: serde_json::Value = match file {
                Some(p) => {
                    let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
                    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?
                }
                None => {
                    let id = id.context("give --file, or at least --id and --type")?;
                    let mut v =
                        serde_json::json!({ "id": id, "type": job_type.context("--type is needed without --file")? });
                    if let Some(n) = iterations {
                        v["iterations"] = n.into();
                    }
                    if let Some(s) = slo {
                        v["slo"] = s.into();
                    }
                    if let Some(cmd) = entrypoint {
                        let mut env = serde_json::Map::new();
                        for e in &envs {
                            let (k, val) =
                                e.split_once('=').with_context(|| format!("--env {e}: expected NAME=VALUE"))?;
                            env.insert(k.to_string(), val.into());
                        }
                        v["launch"] = serde_json::json!({ "entrypoint": cmd, "env": env });
                    }
                    v
                }
            };
            let out = send(&conn, c.post(url(&conn, "/v1/jobs")).json(&body))?;
            print(&conn, &out, |v| {
                let j = &v["job"];
                if j["state"] == "queued" {
                    let start = j["estimated_start_s"]
                        .as_f64()
                        .map_or("no start in view".to_string(), |s| format!("estimated start in {:.0} s", s));
                    return format!(
                        "queued {} at position {} ({}; {start})\n",
                        j["id"],
                        j["queue_position"],
                        j["queue_reason"].as_str().unwrap_or("")
                    );
                }
                format!("admitted {} into group g{} ({})\n", j["id"], j["group"], j["placement"].as_str().unwrap_or(""))
            })
        }
        JobCommand::List { conn } => {
            let out = all_pages(&c, &conn, "/v1/jobs")?;
            print(&conn, &out, |v| {
                let mut t = table::new(&["job", "tenant", "state", "type", "group", "now", "iterations"]);
                for j in v.as_array().into_iter().flatten() {
                    t.add_row(vec![
                        j["id"].as_str().unwrap_or("").to_string(),
                        j["tenant"].as_str().unwrap_or("").to_string(),
                        j["state"].as_str().unwrap_or("").to_string(),
                        j["job_type"].as_str().unwrap_or("").to_string(),
                        j["group"].as_u64().map(|g| format!("g{g}")).unwrap_or_default(),
                        j["granted"].as_str().unwrap_or("-").to_string(),
                        format!(
                            "{}/{}",
                            j["completed_iterations"],
                            j["iterations"].as_u64().map(|n| n.to_string()).unwrap_or_else(|| "-".into())
                        ),
                    ]);
                }
                format!("{t}\n")
            })
        }
        JobCommand::Show { conn, id } => {
            let out = send(&conn, c.get(url(&conn, &format!("/v1/jobs/{id}"))))?;
            print(&conn, &out, |v| format!("{}\n", serde_json::to_string_pretty(&v["job"]).unwrap_or_default()))
        }
        JobCommand::Cancel { conn, id } => {
            let out = send(&conn, c.delete(url(&conn, &format!("/v1/jobs/{id}"))))?;
            print(&conn, &out, |v| format!("{} is {}\n", v["id"], v["state"]))
        }
    }
}

pub fn group(cmd: GroupListCommand) -> Result<()> {
    let GroupListCommand::List { conn } = cmd;
    let out = send(&conn, client()?.get(url(&conn, "/v1/groups")))?;
    print(&conn, &out, |v| {
        let mut t =
            table::new(&["group", "training nodes", "rollout blocks", "members", "meta-iteration s", "saturated"]);
        for g in v.as_array().into_iter().flatten() {
            let names = |key: &str, field: &str| {
                g[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| x[field].to_string().trim_matches('"').to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            t.add_row(vec![
                format!("g{}", g["group"]),
                g["training_nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| n.as_str().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                names("rollout_blocks", "nodes"),
                names("members", "job"),
                format!("{:.1}", g["predicted_meta_iteration_s"].as_f64().unwrap_or(0.0)),
                g["saturated"].to_string(),
            ]);
        }
        format!("{t}\n")
    })
}

fn print(conn: &Conn, v: &serde_json::Value, human: impl Fn(&serde_json::Value) -> String) -> Result<()> {
    let text = if conn.json { json(v)? } else { human(v) };
    write_output(None, &text)
}
