use crate::input::{json, load_cluster, write_output};
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print the effective cluster configuration (TOML, or JSON with --json). Start a custom
    /// config from this output: every key must be present, unknown keys are errors.
    Show {
        /// Cluster config file; the built-in default (the paper's testbed) when omitted.
        #[arg(long, value_name = "FILE")]
        cluster: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: ConfigCommand) -> Result<()> {
    match cmd {
        ConfigCommand::Show { cluster, json: as_json } => {
            let cfg = load_cluster(cluster.as_deref())?;
            let text = if as_json { json(&cfg)? } else { cfg.to_toml() };
            write_output(None, &text)
        }
    }
}
