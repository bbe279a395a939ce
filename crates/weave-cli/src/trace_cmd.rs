use crate::input::{json, read_trace, write_output};
use crate::table;
use anyhow::{bail, ensure, Result};
use clap::{Subcommand, ValueEnum};
use std::path::PathBuf;
use weave_core::MAX_STALENESS;
use weave_model::ProfileModel;
use weave_trace::{
    generate, write_jsonl, AgenticClass, Arrivals, Format, GenConfig, GenMode, ProfileClass, ReadOptions, SizeClass,
    Summary,
};

#[derive(Subcommand)]
pub enum TraceCommand {
    /// Generate a synthetic workload (Weave JSON Lines) from a seed.
    Generate(GenerateArgs),
    /// Summarise a trace: job count, type mix, lifetimes.
    Show {
        file: PathBuf,
        #[arg(long, value_name = "jsonl|wild|philly")]
        format: Option<Format>,
        /// Job type assumed for Philly-derived traces.
        #[arg(long, default_value = "7B_8k")]
        philly_type: weave_core::JobType,
        /// Also list every job.
        #[arg(long)]
        jobs: bool,
        #[arg(long)]
        json: bool,
    },
    /// Convert any supported trace to Weave JSON Lines.
    Convert {
        file: PathBuf,
        #[arg(long, value_name = "jsonl|wild|philly")]
        format: Option<Format>,
        #[arg(long, default_value = "7B_8k")]
        philly_type: weave_core::JobType,
        /// Output file (stdout when omitted).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Production-like mix: 3B..32B, 4k..32k, lifetimes hours to days, SLO uniform [1, 2].
    Production,
    /// Profile classes: see --class and --size.
    Classes,
    /// Synthetic agentic jobs (multi-turn rollouts with tool calls in CPU sandboxes): --class
    /// swe, search, math-tool or mixed.
    Agentic,
    /// Synthetic small LoRA RL jobs on three bases, in bursts of up to six (sweeps); lifetimes
    /// minutes to hours (default --rate 20, --lifetime-median-h 1).
    Lora,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ArrivalArg {
    Poisson,
    Even,
    Batch,
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[arg(long, value_enum, default_value = "production")]
    mode: ModeArg,
    /// Profile class (classes mode).
    #[arg(long, value_enum, default_value = "mixed")]
    class: ClassArg,
    /// Model-size class (classes mode).
    #[arg(long, value_enum, default_value = "mixed")]
    size: SizeArg,
    #[arg(long, default_value_t = 60)]
    jobs: usize,
    #[arg(long, value_enum, default_value = "poisson")]
    arrivals: ArrivalArg,
    /// Mean arrivals per hour (poisson and even; default 1.5, with --mode lora 20).
    #[arg(long)]
    rate: Option<f64>,
    /// Median solo lifetime in hours (log-normal; default 16, with --mode lora 1).
    #[arg(long)]
    lifetime_median_h: Option<f64>,
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// A tenant of a multi-tenant workload, `NAME:WEIGHT[:high=P][:low=P][:burst=N]` (repeat
    /// the flag per tenant): jobs go to tenants by weight, priorities by each tenant's shares,
    /// a bursty tenant's jobs arrive N at a time.
    #[arg(long = "tenant", value_name = "SPEC")]
    tenants: Vec<String>,
    /// Bounded staleness k of every job (0: on-policy).
    #[arg(long, default_value_t = 0)]
    staleness: u32,
    /// Output file (stdout when omitted).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ClassArg {
    Balanced,
    RolloutHeavy,
    TrainingHeavy,
    Mixed,
    /// Agentic mode: SWE-like (tens of turns, shell actions, slow sandbox starts).
    Swe,
    /// Agentic mode: search-like (a few turns, a cheap retriever).
    Search,
    /// Agentic mode: math with a code interpreter.
    MathTool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SizeArg {
    Small,
    Medium,
    Large,
    Mixed,
}

impl GenerateArgs {
    fn config(&self) -> Result<GenConfig> {
        if self.jobs == 0 || self.jobs > 10_000_000 {
            bail!("--jobs must be between 1 and 10,000,000, got {}", self.jobs);
        }
        let lora = matches!(self.mode, ModeArg::Lora);
        let rate = self.rate.unwrap_or(if lora { 20.0 } else { 1.5 });
        let lifetime_median_h = self.lifetime_median_h.unwrap_or(if lora { 1.0 } else { 16.0 });
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of arrivals per hour, got {rate}");
        }
        if !(lifetime_median_h.is_finite() && lifetime_median_h > 0.0) {
            bail!("--lifetime-median-h must be positive, got {lifetime_median_h}");
        }
        let agentic = matches!(self.mode, ModeArg::Agentic);
        let profile = match self.class {
            ClassArg::Balanced => ProfileClass::Balanced,
            ClassArg::RolloutHeavy => ProfileClass::RolloutHeavy,
            ClassArg::TrainingHeavy => ProfileClass::TrainingHeavy,
            ClassArg::Mixed => ProfileClass::Mixed,
            ClassArg::Swe | ClassArg::Search | ClassArg::MathTool if agentic => ProfileClass::Mixed,
            other => bail!("--class {other:?} is an agentic class: use it with --mode agentic"),
        };
        let class = match self.class {
            ClassArg::Swe => AgenticClass::Swe,
            ClassArg::Search => AgenticClass::Search,
            ClassArg::MathTool => AgenticClass::MathTool,
            ClassArg::Mixed => AgenticClass::Mixed,
            other if agentic => bail!("--mode agentic takes --class swe, search, math-tool or mixed, not {other:?}"),
            _ => AgenticClass::Mixed,
        };
        let size = match self.size {
            SizeArg::Small => SizeClass::Small,
            SizeArg::Medium => SizeClass::Medium,
            SizeArg::Large => SizeClass::Large,
            SizeArg::Mixed => SizeClass::Mixed,
        };
        let mode = match self.mode {
            ModeArg::Production => GenMode::Production,
            ModeArg::Classes => GenMode::Classes { profile, size },
            ModeArg::Agentic => GenMode::Agentic { class },
            ModeArg::Lora => GenMode::Lora,
        };
        let arrivals = match self.arrivals {
            ArrivalArg::Poisson => Arrivals::Poisson { per_hour: rate },
            ArrivalArg::Even => Arrivals::Even { per_hour: rate },
            ArrivalArg::Batch => Arrivals::Batch,
        };
        Ok(GenConfig { mode, jobs: self.jobs, arrivals, seed: self.seed, lifetime_median_h })
    }
}

pub fn run(cmd: TraceCommand) -> Result<()> {
    let profile = ProfileModel::builtin();
    match cmd {
        TraceCommand::Generate(args) => {
            let tenants =
                weave_trace::TenantMix::parse_all(&args.tenants).map_err(|e| anyhow::anyhow!("--tenant {e}"))?;
            ensure!(args.staleness <= MAX_STALENESS, "--staleness: at most {MAX_STALENESS}, got {}", args.staleness);
            let mut trace = generate::generate_tenants(&args.config()?, &tenants, &profile);
            trace.jobs.iter_mut().for_each(|j| j.staleness = args.staleness);
            write_output(args.output.as_deref(), &write_jsonl(&trace))
        }
        TraceCommand::Show { file, format, philly_type, jobs, json: as_json } => {
            let trace = read_trace(&file, format, &ReadOptions { philly_default_type: philly_type })?;
            let summary = Summary::of(&trace, &profile);
            if as_json {
                let out = serde_json::json!({
                    "summary": summary,
                    "jobs": if jobs { Some(trace.jobs.iter().map(weave_trace::JsonlJob::from_spec).collect::<Vec<_>>()) } else { None },
                });
                return write_output(None, &json(&out)?);
            }
            let mut text = render_summary(&summary);
            if jobs {
                text.push_str(&render_jobs(&trace));
            }
            write_output(None, &text)
        }
        TraceCommand::Convert { file, format, philly_type, output } => {
            let trace = read_trace(&file, format, &ReadOptions { philly_default_type: philly_type })?;
            write_output(output.as_deref(), &write_jsonl(&trace))
        }
    }
}

pub fn render_summary(s: &Summary) -> String {
    let mut out = format!("trace: {}\n", s.source);
    if let Some(start) = &s.start {
        out.push_str(&format!("starts: {start} UTC\n"));
    }
    out.push_str(&format!(
        "jobs: {}   mean lifetime: {:.1} h   longest: {:.1} h   arrivals span {:.1} h\n",
        s.jobs, s.mean_lifetime_h, s.max_lifetime_h, s.arrival_span_h
    ));
    out.push_str(&format!(
        "jobs with an SLO in the trace: {}   with explicit phase durations: {}\n",
        s.jobs_with_slo, s.jobs_with_explicit_durations
    ));
    let mut t = table::new(&["type", "jobs", "share"]);
    for tc in &s.types {
        t.add_row(vec![
            tc.job_type.clone(),
            tc.jobs.to_string(),
            format!("{:.1}%", 100.0 * tc.jobs as f64 / s.jobs.max(1) as f64),
        ]);
    }
    table::align_numbers(&mut t);
    out.push_str(&format!("{t}\n"));
    out
}

fn render_jobs(trace: &weave_trace::Trace) -> String {
    let mut t = table::new(&["id", "arrival (h)", "type", "width r/t", "slo", "lifetime"]);
    for j in &trace.jobs {
        let life = match j.lifetime {
            weave_core::Lifetime::Iterations(n) => format!("{n} it"),
            weave_core::Lifetime::SoloUntil(end) => format!("{:.1} h", end.saturating_sub(j.arrival).as_hours_f64()),
        };
        t.add_row(vec![
            j.name.clone(),
            format!("{:.2}", j.arrival.as_hours_f64()),
            j.job_type.to_string(),
            format!("{}/{}", j.rollout_nodes, j.train_nodes),
            j.slo.map(|s| format!("{:.2}", s.get())).unwrap_or_else(|| "-".into()),
            life,
        ]);
    }
    table::align_numbers(&mut t);
    format!("{t}\n")
}
