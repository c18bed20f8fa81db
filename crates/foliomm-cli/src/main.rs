//! The `foliomm` command.
#![forbid(unsafe_code)]

mod bench;
mod compare;
mod counters;
mod designs;
mod fuzz;
mod host;
mod interrupt;
mod left_behind;
mod matrix;
mod overrides;
mod prove;
mod referee;
mod settings;
mod sim;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use foliomm_scenario::interp::FailureKind;
use foliomm_scenario::{parse, run, ModelBackend, Outcome, RunOptions};
use referee::Referee;

#[derive(Parser)]
#[command(name = "foliomm", version, about = "An executable model of the Linux memory manager's large-folio machinery")]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenario files on the model, printing each step and the final counters.
    Run(RunArgs),
    /// Measure the model (and the host kernel, where it can) on fixed workloads.
    Bench(bench::BenchArgs),
    /// Run scenario files on the model and on a real kernel (this host's, or
    /// Linux 6.1 in a guest) and set every observation side by side; exit
    /// status 1 on any mismatch (alias: compare).
    #[command(name = "against-kernel", alias = "compare")]
    Compare(CompareArgs),
    /// Compare saved benchmark runs (`bench ... --save NAME`) in the manner
    /// of mmtests: each run's mean, its gain against the first, and whether
    /// that is more than noise.
    CompareRuns(bench::CompareRunsArgs),
    /// Write saved benchmark runs as one self-contained HTML file: their
    /// tables and plots of them, with the seeds' figures.
    Report(bench::ReportArgs),
    /// Random workloads on the model and (with --backend) on a kernel,
    /// every disagreement classified, minimized and saved with its seed.
    Fuzz(fuzz::FuzzCommand),
    /// Check an rmap-ID construction (seed 000): exhaustively over small ID
    /// ranges and mapping counts, at random over 24-bit IDs, and for
    /// overflow. Prints a counterexample and exits 1 if there is one.
    Prove(prove::ProveArgs),
    /// The scenario language's settings (`set NAME ...`): syntax, meaning,
    /// the Linux interface each mirrors and what the host does with it.
    Settings(settings::SettingsArgs),
    /// Every counter a run prints: what it counts, its Linux name, and the
    /// settings or designs it needs (`stat.NAME` in an `expect`).
    Counters(counters::CountersArgs),
    /// The mapcount designs and the memmap space each spends on mapcounts
    /// per folio size (seed 000's Q/A).
    Designs(designs::DesignsArgs),
    /// Host-kernel settings foliomm changes (THP, shmem, the huge page pool).
    #[command(subcommand)]
    Host(HostCommand),
    /// Simulated CPUs: a cost profile measured on this machine.
    #[command(subcommand)]
    Sim(sim::SimCommand),
}

#[derive(Subcommand)]
enum HostCommand {
    /// Put back every host setting a foliomm run changed and did not put
    /// back (a run killed with SIGKILL), from the state file; `--force`
    /// also those of runs still alive.
    Restore {
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::Args)]
struct CompareArgs {
    /// Scenario files, or directories of them.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Settings of the model (the referee runs each file as written); a
    /// flag given 'all' holds every configuration against the one host run.
    #[command(flatten)]
    settings: overrides::SettingFlags,
    /// Print only mismatches and summaries.
    #[arg(long, short)]
    quiet: bool,
    /// The kernel to hold the model against: this machine's, or Linux 6.1
    /// in a qemu guest (the model then follows 6.1, with its design
    /// `subpage`, unless --kernel or --mapcount say otherwise).
    #[arg(long, default_value = "host", value_parser = ["host", "guest"])]
    backend: String,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Scenario files (see scenarios/ and the README for the language), or
    /// directories of them.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Run the invariant checker after every step: over what the step
    /// could have changed (`changed`, the default), in full after the last
    /// step and whenever the step checks since the last full one have
    /// walked twice as much as it did (or every --check-every steps); or in full
    /// after every step (`full`, slower by the size of the machine).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "changed",
          value_parser = ["changed", "full"], value_name = "SCOPE")]
    check: Option<String>,
    /// Steps between full checks under --check (default: when due, see --check).
    #[arg(long, value_name = "N", requires = "check", value_parser = clap::value_parser!(u64).range(1..))]
    check_every: Option<u64>,
    /// Settings, each overriding the files' `set` line of that name
    /// (`foliomm settings` lists them).
    #[command(flatten)]
    settings: overrides::SettingFlags,
    /// Print JSON (one object per file, in an array) instead of tables.
    #[arg(long)]
    json: bool,
    /// Print only failures, skips (with their reasons) and the summary line.
    #[arg(long, short)]
    quiet: bool,
    /// Evaluate every `expect` line: a failed one is reported and the run
    /// goes on (any other failure still stops it).
    #[arg(long)]
    keep_going: bool,
    /// Where to run: the model, the host kernel (real processes; needs
    /// root), or Linux 6.1 in a qemu guest (needs qemu-system-x86 and
    /// linux-image-6.1.0-*-amd64-unsigned).
    #[arg(long, default_value = "model", value_parser = ["model", "host", "guest"])]
    backend: String,
    /// Write the run's trace (one file only): after each step, the touched
    /// pages of every process with the folios' counters, as HTML, or as
    /// JSON if OUT ends in .json.
    #[arg(long, value_name = "OUT")]
    trace: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == foliomm_host::WORKER_ARG) && args.len() == 4 {
        foliomm_host::worker_main(std::path::Path::new(&args[2]), &args[3].to_string_lossy());
    }
    if args.get(1).is_some_and(|a| a == foliomm_host::guest::AGENT_ARG) && args.len() == 3 {
        foliomm_host::guest::agent_main(std::path::Path::new(&args[2]));
    }
    if args.get(1).is_some_and(|a| a == bench::SEED_002_PROGRAM) {
        return if bench::seed_002_program(&args[2..]) { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    foliomm_host::sys::default_sigpipe();
    let cli = Cli::parse();
    // What a run killed without a chance to restore left changed.
    if !matches!(cli.cmd, Command::Host(_)) {
        left_behind::put_back();
    }
    let r = match cli.cmd {
        Command::Run(a) => run_files(a),
        Command::Bench(a) => bench::run(a).map(|_| true),
        Command::Compare(a) => compare_files(a),
        Command::Prove(a) => prove::prove(a),
        Command::Fuzz(fuzz::FuzzCommand { merge: Some(fuzz::FuzzSub::Merge(m)), .. }) => fuzz::merge(&m),
        Command::Fuzz(fuzz::FuzzCommand { merge: Some(fuzz::FuzzSub::Recheck(r)), .. }) => fuzz::recheck(&r),
        Command::Fuzz(fuzz::FuzzCommand { merge: Some(fuzz::FuzzSub::Reproducer { file }), .. }) => {
            fuzz::print_reproducer(&file)
        }
        Command::Fuzz(a) => fuzz::main(a.args),
        Command::Settings(a) => settings::print(&a).map(|_| true),
        Command::Counters(a) => counters::print(&a).map(|_| true),
        Command::Designs(a) => designs::print(&a).map(|_| true),
        Command::Sim(c) => sim::run(&c).map(|_| true),
        Command::CompareRuns(a) => bench::compare_runs(&a).map(|_| true),
        Command::Report(a) => bench::report(&a).map(|_| true),
        Command::Host(HostCommand::Restore { force }) => {
            left_behind::restore(force);
            Ok(true)
        }
    };
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("foliomm: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_files(a: RunArgs) -> Result<bool> {
    let files = scenario_files(&a.files)?;
    if a.trace.is_some() && files.len() != 1 {
        anyhow::bail!("--trace writes the trace of one scenario file; {} were given", files.len());
    }
    let configs = a.settings.configurations();
    let matrix = configs.len() > 1;
    if matrix && (a.backend != "model" || a.trace.is_some()) {
        anyhow::bail!(
            "a flag given 'all' runs a design matrix on the model, without --trace; \
             to hold each configuration against the host, use `compare` with the same flags"
        );
    }
    if a.backend == "guest" && !a.settings.lines.is_empty() {
        anyhow::bail!(
            "--backend guest runs the files as written: put machine settings in the file, not on the command line"
        );
    }
    let (mut passed, mut failed, mut skipped, mut bad) = (0, 0, 0, 0);
    let mut count = |out: &Outcome| match &out.failure {
        None => passed += 1,
        // A scenario the backend cannot run is skipped, as kselftest's KSFT_SKIP.
        Some(f) if f.kind == FailureKind::Unsupported => skipped += 1,
        Some(_) => failed += 1,
    };
    let mut json = Vec::new();
    let mut referee = (a.backend != "model").then(|| Referee::new(&a.backend));
    let opts = RunOptions {
        check: a.check.is_some(),
        check_full: a.check.as_deref() == Some("full"),
        check_every: a.check_every.unwrap_or(0) as usize,
        trace: a.trace.is_some(),
        keep_going: a.keep_going,
        ..RunOptions::default()
    };
    interrupt::install();
    for file in &files {
        interrupt::at_file(file);
        // A file that cannot be read or parsed is reported; the batch goes on.
        let parsed = read_scenario(file).and_then(|src| parse(&src).map(|s| (src, s)).map_err(|e| e.to_string()));
        let (src, steps) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                bad += 1;
                match a.json {
                    true => json.push(serde_json::json!({ "file": file.display().to_string(), "error": e })),
                    false => println!("== {}\n  bad file: {e}", file.display()),
                }
                continue;
            }
        };
        if matrix {
            let cells: Vec<matrix::Cell> = configs
                .iter()
                .map(|config| {
                    let mut steps = steps.clone();
                    config.flags.apply(&mut steps);
                    matrix::Cell { config, outcome: run(&steps, &mut ModelBackend::new(), opts) }
                })
                .collect();
            cells.iter().for_each(|c| count(&c.outcome));
            match a.json {
                true => json.push(matrix::json(file, &cells)),
                false => matrix::print(file, &a.settings.axis_names(), &cells),
            }
            continue;
        }
        let mut steps = steps;
        a.settings.apply(&mut steps);
        let out = match referee.as_mut() {
            Some(r) => r.run(&file.display().to_string(), &src, &steps),
            None => run(&steps, &mut ModelBackend::new(), opts),
        };
        if let Some(path) = &a.trace {
            trace::write(path, file, &out)?;
        }
        count(&out);
        if a.json {
            json.push(serde_json::json!({ "file": file.display().to_string(), "outcome": out }));
        } else {
            print_outcome(file, &out, a.quiet);
        }
    }
    let runs = files.len() * configs.len();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else if matrix {
        let n = (files.len(), configs.len());
        println!("{runs} runs ({} files × {} configurations): {passed} passed, {failed} failed, {skipped} skipped, {bad} bad files", n.0, n.1);
    } else if files.len() > 1 || a.quiet {
        println!("{} files: {passed} passed, {failed} failed, {skipped} skipped, {bad} bad", files.len());
    }
    Ok(failed == 0 && bad == 0)
}

/// The scenario files `paths` name: a file as it is, a directory as the
/// `.fmm` files under it, in name order.
fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let mut found = Vec::new();
        let mut dirs = vec![path.clone()];
        while let Some(dir) = dirs.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| anyhow::anyhow!("cannot list {}: {e}", dir.display()))?;
            for entry in entries {
                let p = entry?.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|e| e == "fmm") {
                    found.push(p);
                }
            }
        }
        if found.is_empty() {
            anyhow::bail!("{} is a directory without scenario files (*.fmm) in it", path.display());
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// A scenario file's text; an error names what is wrong, with the line and
/// column of the first byte that is not UTF-8 or is a control character.
pub(crate) fn read_scenario(file: &std::path::Path) -> Result<String, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read it: {e}"))?;
    let at = |good: &[u8]| {
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        let col = good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
        format!("line {line}, column {col}")
    };
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("{}: not UTF-8 text", at(&e.as_bytes()[..e.utf8_error().valid_up_to()])))?;
    // A control character (a NUL, an escape) is no part of a scenario, and
    // would reach the terminal raw in a message.
    match text.bytes().position(|b| b.is_ascii_control() && !b"\t\r\n".contains(&b)) {
        Some(i) => Err(format!(
            "{}: a control character (byte {:#04x}), not scenario text",
            at(&text.as_bytes()[..i]),
            text.as_bytes()[i]
        )),
        None => Ok(text),
    }
}

fn compare_files(a: CompareArgs) -> Result<bool> {
    let files = scenario_files(&a.files)?;
    let (mut total, mut agree, mut differ) = (0, 0, 0);
    let mut referee = Referee::new(&a.backend);
    // The model follows the referee's release unless a flag says otherwise.
    let release = referee.release().filter(|_| !a.settings.sets_kernel());
    let model_settings = a.settings.with(release.map(overrides::SettingFlags::kernel));
    let configs = model_settings.configurations();
    let mut per_config = vec![(0, 0); configs.len()];
    let mut skipped: Vec<String> = Vec::new();
    let mut bad: Vec<String> = Vec::new();
    for file in &files {
        interrupt::at_file(file);
        let name = file.display().to_string();
        // A file that cannot be read or parsed is reported; the batch goes on.
        let parsed = read_scenario(file).and_then(|src| parse(&src).map(|s| (src, s)).map_err(|e| e.to_string()));
        let (src, steps) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                println!("== {name}\n  bad file: {e}");
                bad.push(name);
                continue;
            }
        };
        let host = referee.run(&name, &src, &steps);
        if let Some(f) = host.failure.as_ref().filter(|f| f.kind == FailureKind::Unsupported) {
            println!("== {name}\n  skipped on the host: {}", f.message);
            skipped.push(format!("{name}: {}", f.message));
            continue;
        }
        // Each configuration of a matrix is held against the one host run.
        for (config, tally) in configs.iter().zip(&mut per_config) {
            let mut steps = steps.clone();
            config.flags.apply(&mut steps);
            let model = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
            let label = if configs.len() > 1 { format!("{name} [{}]", config.name) } else { name.clone() };
            let n = compare::report(&label, &model, &host, a.quiet);
            total += n;
            *tally = (tally.0 + n, tally.1 + (n > 0) as usize);
            if n == 0 {
                agree += 1;
            } else {
                differ += 1;
            }
        }
    }
    if configs.len() > 1 {
        let width = configs.iter().map(|c| c.name.len()).max().unwrap_or(0).max("configuration".len());
        println!("{:<width$}  {:>10}  files that differ", "configuration", "mismatches");
        for (c, (n, files)) in configs.iter().zip(&per_config) {
            println!("{:<width$}  {n:>10}  {files}", c.name);
        }
    }
    println!("{total} mismatches in all");
    let per = if configs.len() > 1 { format!(" ({} configurations each)", configs.len()) } else { String::new() };
    println!(
        "compared {} of {} files{per}: {agree} agree, {differ} differ, {} skipped on the host, {} bad",
        files.len() - skipped.len() - bad.len(),
        files.len(),
        skipped.len(),
        bad.len()
    );
    // A file the host kernel cannot run (a setting it cannot take) is a
    // skip, not a failure; a host backend that cannot run at all (no root)
    // compared nothing, and says so with a failing status.
    let unavailable = skipped.iter().any(|s| s.contains("needs root"));
    if agree + differ == 0 && unavailable {
        println!("nothing was compared: the host backend cannot run here");
    }
    Ok(total == 0 && differ == 0 && bad.is_empty() && !(agree + differ == 0 && unavailable))
}

/// A file's run: how it ended first, then its steps, counters and
/// measures, and every failed `expect` line of a run that kept going;
/// with `quiet`, only how it ended, and nothing for a file that passed.
fn print_outcome(file: &std::path::Path, out: &Outcome, quiet: bool) {
    if quiet && out.failure.is_none() {
        return;
    }
    println!("== {} ({})", file.display(), out.backend);
    println!("  {}", matrix::verdict(out));
    if !quiet {
        let width = out.steps.iter().map(|s| s.text.len()).max().unwrap_or(0).min(60);
        for s in &out.steps {
            println!("  {:>4}  {:<width$}  {}", s.line, s.text, s.result);
        }
        print_counters(&out.counters);
    }
    for m in &out.measures {
        println!("  measure {}: {:.6} s, {} steps, {:.0} steps/s", m.name, m.seconds, m.ops, m.ops_per_second());
        if let Some(c) = &m.contention {
            println!("    {c}");
        }
        if m.threads.len() > 1 {
            for t in &m.threads {
                println!("    {:<12} {:>8} steps {:>12.0} steps/s", t.thread, t.ops, t.ops_per_second());
            }
        }
    }
    for n in &out.notes {
        println!("  note: {n}");
    }
    let stopped_at = out.failure.as_ref().map(|f| f.line);
    for f in out.failed_expects.iter().filter(|f| Some(f.line) != stopped_at) {
        println!("  also FAIL at line {}: {}", f.line, f.message);
    }
}

/// Counters printed even at 0: the safety ones (a wrong "exclusive" is a
/// data leak), whose 0 is the news.
const ALWAYS_PRINTED: &[&str] = &["precision_wrong_exclusive"];

/// The counters that are not 0, and the safety ones, in columns.
fn print_counters(counters: &[(String, u64)]) {
    let nonzero: Vec<_> = counters.iter().filter(|(n, v)| *v != 0 || ALWAYS_PRINTED.contains(&n.as_str())).collect();
    if nonzero.is_empty() {
        return;
    }
    println!("  counters:");
    let width = nonzero.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    // As many columns as fit in 112 characters, each `name value` plus 3 spaces.
    let columns = (111 / (width + 13)).max(1);
    for chunk in nonzero.chunks(columns) {
        let row: Vec<String> = chunk.iter().map(|(n, v)| format!("{n:<width$}{v:>10}")).collect();
        println!("    {}", row.join("   "));
    }
}
