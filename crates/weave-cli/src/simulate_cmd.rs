use crate::input::{json, load_cluster, write_output, TraceArgs};
use crate::trace_cmd::render_summary;
use anyhow::Result;
use std::path::PathBuf;
use weave_model::ProfileModel;
use weave_trace::Summary;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    trace: TraceArgs,
    /// Cluster config (TOML); the paper's testbed when omitted.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Seed for every random stream of the replay.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

const NOT_YET: &str =
    "the trace-replay simulator is not implemented yet (issue 5): this prints the loaded workload only";

pub fn run(args: Args) -> Result<()> {
    let profile = ProfileModel::builtin();
    let cluster = load_cluster(args.cluster.as_deref())?;
    let trace = args.trace.load(&profile)?;
    let summary = Summary::of(&trace, &profile);
    if args.json {
        let out = serde_json::json!({ "status": NOT_YET, "seed": args.seed, "workload": summary, "cluster": cluster });
        return write_output(None, &json(&out)?);
    }
    let mut text = render_summary(&summary);
    text.push_str(&format!(
        "cluster: {} {} nodes + {} {} nodes\n\nnote: {NOT_YET}.\n",
        cluster.rollout.nodes, cluster.rollout.gpu, cluster.training.nodes, cluster.training.gpu
    ));
    write_output(None, &text)
}
