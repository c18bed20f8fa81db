//! `foliomm fuzz`: random workloads ([`generate`]) run on the model (with
//! the invariant checker and the reference byte model) and, with
//! `--backend host` or `guest`, on a kernel too, compared as `compare`
//! compares. Every disagreement is classified, minimized ([`minimize`])
//! and saved with its seed into the findings directory.

mod avoid;
mod feedback;
mod generate;
mod known;
mod merge;
mod minimize;
mod recheck;
mod reproducer;

use avoid::{avoid_next_time, avoidable, avoided, first_varying_fields, parse_field};
use known::Known;
use merge::Summary;
pub use merge::{merge, MergeArgs};
pub use recheck::{recheck, RecheckArgs};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use foliomm_scenario::interp::FailureKind;
use foliomm_scenario::{parse, run, ModelBackend, Outcome, RunOptions};

use crate::compare::differences;
use crate::overrides;
use crate::referee::Referee;
use foliomm::internals::release::KernelVersion;

/// `foliomm fuzz [OPTIONS]`, or `foliomm fuzz merge FILES...`.
#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FuzzCommand {
    #[command(subcommand)]
    pub merge: Option<FuzzSub>,
    #[command(flatten)]
    pub args: FuzzArgs,
}

#[derive(clap::Subcommand)]
pub enum FuzzSub {
    /// Combine the `--json` summaries of shards into one per kernel, their
    /// findings de-duplicated by minimized scenario.
    Merge(MergeArgs),
    /// Run earlier findings again on the kernel (after a kernel or model
    /// change) and say which still stand.
    Recheck(RecheckArgs),
    /// Print a self-contained C program that replays a scenario with plain
    /// system calls and checks every read against the reference model's
    /// bytes (what a `host-integrity` finding gets as `reproducer.c`).
    Reproducer {
        /// The scenario file.
        file: PathBuf,
    },
}

/// `foliomm fuzz reproducer FILE`: the C program on stdout.
pub fn print_reproducer(file: &std::path::Path) -> anyhow::Result<bool> {
    let text = crate::read_scenario(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let c = reproducer::c_reproducer(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    print!("{c}");
    Ok(true)
}

#[derive(clap::Args)]
pub struct FuzzArgs {
    /// Where the workloads run besides the model: `model` (the model
    /// against its checker and reference bytes only), `host`, `guest`.
    #[arg(long, default_value = "model", value_parser = ["model", "host", "guest"])]
    backend: String,
    /// The seeds, `A..B` (B excluded).
    #[arg(long, default_value = "0..100", value_parser = parse_seeds)]
    seeds: (u64, u64),
    /// Run only the seeds `s` of the range with `s % N == I` (`I/N`): one
    /// shard of a run spread over processes or machines (`fuzz merge`
    /// combines their `--json` summaries).
    #[arg(long, value_parser = parse_shard)]
    shard: Option<(u64, u64)>,
    /// Random steps per workload.
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// The generator (`g1` to `g9`): a seed names a workload together with it.
    #[arg(long, default_value = "g9", value_parser = generate::VERSIONS)]
    generator: String,
    /// How often a disagreeing workload is run again on the kernel, to
    /// tell a kernel that disagrees with itself from a model bug.
    #[arg(long, default_value_t = 2)]
    reruns: usize,
    /// Runs a minimization may try, per finding.
    #[arg(long, default_value_t = 200)]
    budget: usize,
    /// Where findings are written (a directory per finding).
    #[arg(long, default_value = "fuzz-findings")]
    findings: PathBuf,
    /// A model setting for every workload, as a scenario line
    /// (`--set "debug reuse-shared"` breaks the model on purpose).
    #[arg(long = "set")]
    set: Vec<String>,
    /// Print each workload (and how the model ended it) instead of
    /// running the kernel: to see what a seed makes.
    #[arg(long)]
    show: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Steer generation by what the model did: kinds of step that reached
    /// new counters and magnitudes are drawn more often (see `--help` of
    /// the summary's `features`). The run then depends on its seeds' order.
    #[arg(long)]
    feedback: bool,
    /// A field the workloads do not observe (`observe ... except FIELD`),
    /// besides those listed in the findings directory's `avoid.txt`, to
    /// which each host-nondeterministic finding adds the fields that
    /// varied on the kernel: the next run avoids them.
    #[arg(long, value_parser = parse_field)]
    avoid: Vec<String>,
    /// More known differences (the format of the shipped
    /// `known-differences.txt`): findings they explain are not counted.
    #[arg(long)]
    known: Vec<PathBuf>,
}

fn parse_seeds(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("expected seeds as A..B, found '{s}'"))?;
    let n = |t: &str| t.parse::<u64>().map_err(|_| format!("'{t}' in '{s}' is not a seed number"));
    let (a, b) = (n(a)?, n(b)?);
    if a >= b {
        return Err(format!("the seed range '{s}' is empty"));
    }
    Ok((a, b))
}

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("expected a shard as I/N with I < N, found '{s}'");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n) = (i.parse::<u64>().map_err(|_| bad())?, n.parse::<u64>().map_err(|_| bad())?);
    if i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// What kind of disagreement a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Class {
    /// The model broke an invariant or lost bytes its reference kept.
    ModelBroken,
    /// The kernel agrees with itself over reruns and the model does not
    /// show what it shows.
    ModelDiffers,
    /// The kernel disagrees with itself over reruns.
    HostNondeterministic,
    /// Bytes a process read on the kernel are not what the reference says,
    /// while the model agrees with the reference: a kernel-bug candidate.
    HostIntegrity,
    /// A difference on the list of known ones ([`Known`]); not a finding.
    Known,
    /// The kernel could not run the workload (a setting it lacks).
    Skipped,
}

impl Class {
    /// Whether a finding of this class counts against the run (a kernel
    /// disagreeing with itself, a known difference or a skip does not).
    fn counts(self) -> bool {
        matches!(self, Class::ModelBroken | Class::ModelDiffers | Class::HostIntegrity)
    }

    fn name(self) -> &'static str {
        match self {
            Class::ModelBroken => "model-broken",
            Class::ModelDiffers => "model-differs",
            Class::HostNondeterministic => "host-nondeterministic",
            Class::HostIntegrity => "host-integrity",
            Class::Known => "known-difference",
            Class::Skipped => "skipped-by-the-kernel",
        }
    }
}

/// The workload text of a seed, with the run's model settings and its
/// observations without the fields to avoid, and the kinds of step it
/// drew; for the 6.1 guest without the per-size THP and shmem settings it
/// lacks (6.8+ and 6.11+).
fn workload(seed: u64, args: &FuzzArgs, bias: Option<&[f64]>) -> (String, Vec<u32>) {
    let (mut text, drawn) = generate::scenario(&args.generator, seed, args.steps, bias);
    if args.backend == "guest" {
        let per_size = |l: &str| l.starts_with("set thp ") || l.starts_with("set shmem ");
        text = text
            .lines()
            .map(|l| if per_size(l) { l.split(" 64K=").next().unwrap() } else { l })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
    }
    if !args.avoid.is_empty() {
        let except = format!(" except {}", args.avoid.join(" "));
        text = text
            .lines()
            .map(|l| if l.contains(": observe ") { l.to_string() + &except } else { l.into() })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
    }
    let extra: String = args.set.iter().map(|s| format!("set {s}\n")).collect();
    (text.replacen('\n', &format!("\n{extra}"), 1), drawn)
}

/// The model's run of `text` (checker on), following `release` where the
/// referee is not the default release (the 6.1 guest); None if it does not
/// parse.
fn on_model(text: &str, release: Option<KernelVersion>) -> Option<Outcome> {
    let mut steps = parse(text).ok()?;
    if let Some(v) = release {
        steps.insert(0, overrides::SettingFlags::kernel(v));
    }
    Some(run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() }))
}

/// Whether the model run broke the model itself
/// ([`foliomm_scenario::fuzz::broke_the_model`], as the cargo-fuzz targets judge it).
fn broken(o: &Outcome) -> bool {
    foliomm_scenario::fuzz::broke_the_model(o).is_some()
}

/// The fields a list of differences names (`frame`, `present`, a failure).
fn fields(diffs: &[String]) -> Vec<String> {
    let mut f: Vec<String> = diffs
        .iter()
        .filter_map(|d| d.split_once(": ").map(|(_, r)| r.split(':').next().unwrap_or(r).to_string()))
        .collect();
    f.sort();
    f.dedup();
    f
}

/// Runs the fuzzer; true when no finding counts (a kernel disagreeing
/// with itself does not).
pub fn main(mut args: FuzzArgs) -> anyhow::Result<bool> {
    args.avoid.extend(avoided(&args.findings)?);
    args.avoid.sort();
    args.avoid.dedup();
    let mut referee = (args.backend != "model").then(|| Referee::new(&args.backend));
    let release = referee.as_ref().and_then(Referee::release);
    let known = Known::load(&args.known, release.or(Some(KernelVersion::NEWEST)))?;
    let (mut model_time, mut host_time) = (Duration::ZERO, Duration::ZERO);
    let mut sum = Summary {
        generator: args.generator.clone(),
        backend: args.backend.clone(),
        kernel: "model".into(),
        seeds: format!("{}..{}", args.seeds.0, args.seeds.1),
        avoided: args.avoid.iter().cloned().collect(),
        ..Summary::default()
    };
    if let Some((i, n)) = args.shard {
        sum.seeds += &format!(" shard {i}/{n}");
    }
    let seeds: Vec<u64> = (args.seeds.0..args.seeds.1).filter(|s| args.shard.is_none_or(|(i, n)| s % n == i)).collect();
    let mut steer = args.feedback.then(feedback::Feedback::new);
    let mut counted = 0;
    for (i, &seed) in seeds.iter().enumerate() {
        if i % 20 == 0 && seeds.len() > 20 {
            eprintln!("foliomm fuzz: {i} of {} workloads, {} features", seeds.len(), sum.features.len());
        }
        let (text, drawn) = workload(seed, &args, steer.as_ref().map(feedback::Feedback::bias));
        let t = Instant::now();
        let Some(model) = on_model(&text, release) else {
            anyhow::bail!("the generator made a workload that does not parse (seed {seed}):\n{text}");
        };
        model_time += t.elapsed();
        if args.show {
            let end =
                model.failure.as_ref().map_or("passed".into(), |f| format!("failed at line {}: {}", f.line, f.message));
            println!("{text}# model: {end}\n");
            continue;
        }
        sum.workloads += 1;
        sum.coverage.extend(model.counters.iter().filter(|(_, v)| *v > 0).map(|(n, _)| n.clone()));
        let features = feedback::features(&model.counters);
        if let Some(fb) = steer.as_mut() {
            fb.learn(&features, &drawn);
        }
        sum.features.extend(features);
        let class = if broken(&model) {
            Some((Class::ModelBroken, Vec::new()))
        } else if let Some(r) = referee.as_mut() {
            let t = Instant::now();
            let host = on_kernel(r, &text);
            host_time += t.elapsed();
            sum.kernel = kernel_name(&host.backend);
            classify(r, &text, (&model, &host), args.reruns, &known)
        } else {
            None
        };
        let Some((class, varies)) = class else { continue };
        if !matches!(class, Class::Known | Class::Skipped) {
            sum.saved.push(keep(&args, referee.as_mut(), (seed, &text), (class, &varies), &known)?);
            avoid_next_time(&args.findings, &avoidable(&varies))?;
        }
        *sum.findings.entry(class.name().to_string()).or_default() += 1;
        counted += usize::from(class.counts());
    }
    (sum.model_seconds, sum.kernel_seconds) = (model_time.as_secs_f64(), host_time.as_secs_f64());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        sum.print();
        if let Some(fb) = &steer {
            println!("feedback weights: {}", fb.describe());
        }
        let sets: String = args.set.iter().map(|s| format!(" --set \"{s}\"")).collect();
        let sets = sets + &args.avoid.iter().map(|f| format!(" --avoid {f}")).collect::<String>();
        let shard = args.shard.map_or(String::new(), |(i, n)| format!(" --shard {i}/{n}"));
        let shard = shard + if args.feedback { " --feedback" } else { "" };
        println!(
            "reproduce: foliomm fuzz --backend {} --generator {} --seeds {}..{} --steps {}{shard}{sets}",
            args.backend, args.generator, args.seeds.0, args.seeds.1, args.steps
        );
    }
    Ok(counted == 0)
}

/// The kernel a referee's outcome names, with this machine's release for
/// the host (the guest's outcome names its own): summaries merge per kernel.
fn kernel_name(backend: &str) -> String {
    match backend {
        "host" => {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            format!("host, Linux {}", release.trim())
        }
        other => other.to_string(),
    }
}

/// The kernel's run of `text`.
fn on_kernel(r: &mut Referee, text: &str) -> Outcome {
    let steps = parse(text).expect("a workload the model ran parses");
    r.run("fuzz.fmm", text, &steps)
}

/// The class of a model run against a kernel run, rerunning the kernel to
/// see whether it agrees with itself, with the observation fields that
/// varied between the kernel's runs (for [`Class::HostNondeterministic`]);
/// None when they agree. Bytes the
/// kernel lost while the model kept the reference's are a data-integrity
/// failure even when the kernel loses them only sometimes (a race in the
/// kernel is the likelier cause then, not the less serious one).
fn classify(
    r: &mut Referee,
    text: &str,
    (model, host): (&Outcome, &Outcome),
    reruns: usize,
    known: &Known,
) -> Option<(Class, Vec<String>)> {
    let class = |c: Class| Some((c, Vec::new()));
    if host.failure.as_ref().is_some_and(|f| f.kind == FailureKind::Unsupported) {
        return class(Class::Skipped);
    }
    let diffs = differences(model, host);
    if diffs.is_empty() {
        return None;
    }
    if diffs.iter().all(|d| known.why(d).is_some()) {
        return class(Class::Known);
    }
    if lost_bytes(host) && model.failure.is_none() {
        return class(Class::HostIntegrity);
    }
    for _ in 0..reruns {
        let varied = differences(host, &on_kernel(r, text));
        if !varied.is_empty() {
            return Some((Class::HostNondeterministic, first_varying_fields(&varied)));
        }
    }
    class(Class::ModelDiffers)
}

/// Whether a run read bytes the reference model says it cannot have.
fn lost_bytes(o: &Outcome) -> bool {
    o.failure.as_ref().is_some_and(|f| f.message.starts_with("data integrity"))
}

/// Minimizes a finding (keeping its class, and for a disagreement at
/// least one field it disagreed on) and writes it to the findings
/// directory; returns the finding's directory.
fn keep(
    args: &FuzzArgs,
    mut referee: Option<&mut Referee>,
    (seed, text): (u64, &str),
    (class, varies): (Class, &[String]),
    known: &Known,
) -> anyhow::Result<String> {
    let dir = args.findings.join(format!("{}-{}-{seed}", class.name(), args.generator));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("original.fmm"), text)?;
    let release = referee.as_deref().and_then(Referee::release);
    let original = on_model(text, release).expect("it ran");
    // The fields of the differences that are not known ones: what the
    // minimized scenario must still show.
    let unknown =
        |diffs: Vec<String>| fields(&diffs.into_iter().filter(|d| known.why(d).is_none()).collect::<Vec<_>>());
    // A kernel that shows the difference only sometimes (it agreed on the
    // first look again) gets a few tries per candidate, as for lost bytes.
    let mut tries = 1;
    let mut first_fields = Vec::new();
    if let Some(r) = referee.as_deref_mut().filter(|_| class != Class::ModelBroken) {
        for n in 1..=args.reruns + 1 {
            first_fields = unknown(differences(&original, &on_kernel(r, text)));
            if !first_fields.is_empty() {
                tries = if n == 1 { 1 } else { args.reruns + 1 };
                break;
            }
        }
    }
    let reproduces = |t: &str| -> bool {
        let Some(m) = on_model(t, release) else { return false };
        match (class, referee.as_deref_mut()) {
            (Class::ModelBroken, _) => {
                broken(&m) && original.failure.as_ref().map(|f| f.kind) == m.failure.as_ref().map(|f| f.kind)
            }
            // The kernel may lose the bytes only sometimes: a few tries.
            (Class::HostIntegrity, Some(r)) => {
                m.failure.is_none() && (0..=args.reruns).any(|_| lost_bytes(&on_kernel(r, t)))
            }
            (_, Some(r)) => {
                (0..tries).any(|_| unknown(differences(&m, &on_kernel(r, t))).iter().any(|x| first_fields.contains(x)))
            }
            (_, None) => false,
        }
    };
    let (small, tried) = if class == Class::HostNondeterministic {
        (text.to_string(), 0)
    } else {
        minimize::minimize(text, reproduces, args.budget)
    };
    std::fs::write(dir.join("scenario.fmm"), &small)?;
    // A kernel-bug candidate gets a program that shows it without foliomm
    // (or the reason it could not be written, in its place).
    if class == Class::HostIntegrity {
        let c = reproducer::c_reproducer(&small).unwrap_or_else(|e| format!("/* no reproducer: {e} */\n"));
        std::fs::write(dir.join("reproducer.c"), c)?;
    }
    let about = serde_json::json!({
        "class": class.name(),
        "generator": args.generator,
        "seed": seed,
        "backend": args.backend,
        "settings": args.set,
        "feedback": args.feedback,
        "fields": first_fields,
        "varies_on_the_kernel": varies,
        "avoided": args.avoid,
        "steps_before": text.lines().count(),
        "steps_after": small.lines().count(),
        "minimization_runs": tried,
    });
    std::fs::write(dir.join("finding.json"), serde_json::to_string_pretty(&about)?)?;
    Ok(dir.display().to_string())
}
