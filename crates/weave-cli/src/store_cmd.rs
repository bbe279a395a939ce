//! `weave store verify`, `recover` and `export`: check a server's durable store, drop a damaged
//! tail when asked (never silently; a copy of the file is kept), and copy what can still be
//! read of a store damaged inside its storage engine into a new data directory.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use weave_server::plane::Record;

#[derive(clap::Subcommand)]
pub enum StoreCommand {
    /// Check every record of a server's store (checksum, order, format); never writes.
    Verify {
        /// The server's data directory (`weave serve --data`).
        #[arg(long, value_name = "DIR", default_value = "weave-data")]
        data: PathBuf,
    },
    /// Keep records 0..=N and drop the rest, after copying the store file aside. Stop the
    /// server first; `weave store verify` says which N keeps every good record.
    Recover {
        #[arg(long, value_name = "DIR", default_value = "weave-data")]
        data: PathBuf,
        #[arg(long, value_name = "N")]
        truncate_after: u64,
    },
    /// Copy the newest intact snapshot and every record after it that can still be read (up to
    /// the first that cannot) into a new data directory, with the server's other files (its
    /// placement and job-token key); the damaged store is not changed. For a store damaged
    /// inside its storage engine, or whose file cannot be opened at all (then from the newest
    /// snapshot file its manifest beside it says is whole: the records after it are lost);
    /// start the server on the new directory afterwards.
    Export {
        #[arg(long, value_name = "DIR", default_value = "weave-data")]
        data: PathBuf,
        /// The new data directory (must not exist).
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
    /// Move a stopped server's store into an empty prefix of an etcd cluster (its newest
    /// snapshot, the records after it, its placement and job-token key), so that replicas
    /// started with `weave serve --etcd` go on from it. The store is only read.
    ToEtcd {
        #[arg(long, value_name = "DIR", default_value = "weave-data")]
        data: PathBuf,
        /// etcd client URLs.
        #[arg(long, value_name = "URLS", value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        #[arg(long, value_name = "PREFIX", default_value = "/weave")]
        etcd_prefix: String,
    },
}

fn store_file(data: &Path) -> PathBuf {
    data.join("weave.redb")
}

pub fn run(cmd: StoreCommand) -> Result<()> {
    match cmd {
        StoreCommand::Verify { data } => verify(&data),
        StoreCommand::Export { data, to } => export(&data, &to),
        StoreCommand::ToEtcd { data, etcd, etcd_prefix } => to_etcd(&data, &etcd, &etcd_prefix),
        StoreCommand::Recover { data, truncate_after } => {
            let path = store_file(&data);
            let (dropped, backup) = weave_store::truncate_after(&path, truncate_after)?;
            println!(
                "{}: kept records 0..={truncate_after}, dropped {dropped}; the file as it was is {}",
                path.display(),
                backup.display()
            );
            Ok(())
        }
    }
}

/// The server's files in a data directory besides its store.
const SERVER_FILES: [&str; 2] = ["placement", "job-token.key"];

fn export(data: &Path, to: &Path) -> Result<()> {
    use anyhow::Context;
    if to.exists() {
        bail!("{}: already exists: export writes a new data directory", to.display());
    }
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let e = weave_store::export(&store_file(data), &store_file(to))?;
    for name in SERVER_FILES {
        let from = data.join(name);
        if from.exists() {
            std::fs::copy(&from, to.join(name)).with_context(|| format!("cannot copy {}", from.display()))?;
        }
    }
    let snapshot = e.snapshot_at.map_or(String::new(), |at| format!("the snapshot of records 0..{at} and "));
    let first = e.snapshot_at.unwrap_or(0);
    println!("{}: copied {snapshot}{} records after it into {}", data.display(), e.records, to.display());
    if let Some(why) = &e.passed_over {
        println!("passed over a newer snapshot: {why}");
    }
    match &e.stopped_at {
        None => println!("every record was copied"),
        Some((seq, why)) => println!(
            "record {seq} cannot be read ({why}): the new store holds the state after records 0..{}; what came \
             after is not in it",
            first + e.records
        ),
    }
    println!("start the server with `--data {}`", to.display());
    Ok(())
}

fn to_etcd(data: &Path, endpoints: &[String], prefix: &str) -> Result<()> {
    use anyhow::Context;
    use weave_server::state::replicated::{seed_from_store, EtcdConfig};
    if !store_file(data).exists() {
        bail!("{}: no store here (give the server's --data)", store_file(data).display());
    }
    let e = EtcdConfig::new(endpoints, prefix, Some("to-etcd".into()), 10).map_err(|e| anyhow::anyhow!(e))?;
    let seeded = seed_from_store(data, &e).with_context(|| format!("moving {} into etcd", data.display()))?;
    let snapshot = seeded
        .snapshot_at
        .map_or(String::new(), |at| format!("the snapshot of records 0..{at} ({} bytes) and ", seeded.snapshot_bytes));
    println!(
        "{}: copied {snapshot}{} records after it into {} under {prefix}",
        data.display(),
        seeded.records,
        endpoints.join(",")
    );
    println!(
        "start the replicas with `--etcd {} --etcd-prefix {prefix}` and the same placement flags",
        endpoints.join(",")
    );
    Ok(())
}

fn verify(data: &Path) -> Result<()> {
    let path = store_file(data);
    let v = weave_store::verify::<Record>(&path)?;
    let unchecked = if v.unchecked > 0 {
        format!(" ({} written before checksums: readable, not verifiable)", v.unchecked)
    } else {
        String::new()
    };
    let snapshot = v.snapshot_at.map_or(String::new(), |at| format!("a snapshot of records 0..{at} and "));
    if let Some(why) = &v.passed_over {
        // Nothing to repair by hand: the older state was kept for this, and the next snapshot
        // replaces the damaged one.
        println!(
            "{}: {why}
the server passes it over and rebuilds the state from the snapshot before it (or the first \
             record) and the records after that, all kept; the next snapshot replaces it",
            path.display()
        );
    }
    match v.first_bad {
        None => {
            println!("{}: {snapshot}{} records, all good{unchecked}", path.display(), v.records);
            Ok(())
        }
        Some((seq, why)) if v.snapshot_at.is_none_or(|at| seq < at) && why.contains("snapshot") => bail!(
            "{}: {why}\nthe snapshot holds the state of every record before it and cannot be rebuilt without them; \
             restore the data directory from a backup",
            path.display()
        ),
        Some((seq, why)) => {
            let keep = match seq.checked_sub(1).filter(|last| v.snapshot_at.is_none_or(|at| *last + 1 >= at)) {
                Some(last) => format!(
                    "records 0..={last} are good: `weave store recover --data {} --truncate-after {last}` keeps them",
                    data.display()
                ),
                None => "no record before it is good (after the snapshot, if any)".to_string(),
            };
            bail!("{}: {why}\n{keep} (the file is copied aside first)", path.display())
        }
    }
}
