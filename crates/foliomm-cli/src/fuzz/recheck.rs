//! `foliomm fuzz recheck`: the findings of earlier runs run again, on this
//! machine's kernel or the guest, to see which still stand (a new kernel
//! may have fixed a bug, or the model a difference).

use std::path::{Path, PathBuf};

use super::{classify, on_kernel, on_model, Class, Known};
use crate::referee::Referee;

/// `foliomm fuzz recheck [--backend host|guest] DIRS...`.
#[derive(clap::Args)]
pub struct RecheckArgs {
    /// The kernel to recheck on.
    #[arg(long, default_value = "host", value_parser = ["host", "guest"])]
    backend: String,
    /// Reruns of the kernel per finding, as `fuzz --reruns`.
    #[arg(long, default_value_t = 2)]
    reruns: usize,
    /// Finding directories, or directories of them (`--findings` of a run).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
}

/// The finding directories under `dirs` (those holding a `scenario.fmm`).
fn findings(dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for d in dirs {
        if d.join("scenario.fmm").is_file() {
            out.push(d.clone());
            continue;
        }
        let mut inner: Vec<PathBuf> = std::fs::read_dir(d)
            .map_err(|e| anyhow::anyhow!("{}: {e}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("scenario.fmm").is_file())
            .collect();
        inner.sort();
        out.extend(inner);
    }
    Ok(out)
}

/// The class a finding was saved with (`finding.json`).
fn class_then(dir: &Path) -> String {
    let about = std::fs::read_to_string(dir.join("finding.json")).unwrap_or_default();
    let about: serde_json::Value = serde_json::from_str(&about).unwrap_or_default();
    about["class"].as_str().unwrap_or("unknown").to_string()
}

/// Reruns every finding's minimized scenario on the model and the kernel
/// and prints its class then and now; true when none still counts.
pub fn recheck(args: &RecheckArgs) -> anyhow::Result<bool> {
    let mut referee = Referee::new(&args.backend);
    let release = referee.release();
    let known = Known::load(&[], release.or(Some(foliomm::internals::release::KernelVersion::NEWEST)))?;
    let mut standing = 0;
    for dir in findings(&args.dirs)? {
        let text = std::fs::read_to_string(dir.join("scenario.fmm"))?;
        let now = match on_model(&text, release) {
            None => Err("does not parse"),
            Some(model) if super::broken(&model) => Ok(Some(Class::ModelBroken)),
            Some(model) => {
                let host = on_kernel(&mut referee, &text);
                Ok(classify(&mut referee, &text, (&model, &host), args.reruns, &known).map(|(c, _)| c))
            }
        };
        if now.is_err() || now.is_ok_and(|c| c.is_some_and(Class::counts)) {
            standing += 1;
        }
        let now = now.map_or_else(str::to_string, |c| c.map_or("agrees", Class::name).to_string());
        println!("{}: was {}, now {now}", dir.display(), class_then(&dir));
    }
    println!("{standing} findings still stand");
    Ok(standing == 0)
}
