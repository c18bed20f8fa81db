//! Records the commit the binary is built from (`git describe --always
//! --dirty`) for saved benchmark runs.

fn main() {
    let out = std::process::Command::new("git").args(["describe", "--always", "--dirty"]).output();
    if let Some(commit) = out.ok().filter(|o| o.status.success()).and_then(|o| String::from_utf8(o.stdout).ok()) {
        println!("cargo:rustc-env=FOLIOMM_COMMIT={}", commit.trim());
    }
    // HEAD names the branch; its log moves with every commit and checkout,
    // the index with every staged change.
    for path in ["HEAD", "logs/HEAD", "index"] {
        println!("cargo:rerun-if-changed=../../.git/{path}");
    }
}
