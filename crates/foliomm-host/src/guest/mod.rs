//! The guest backend: scenarios run on Linux 6.1 in a virtual machine, the
//! referee for the designs of its era (`subpage`). foliomm boots Debian's
//! 6.1 kernel under qemu (software emulation) with an initramfs it builds
//! from this machine's files (`initramfs`); inside, `foliomm` runs as an
//! agent on the second serial port (`agent`) and runs each scenario file
//! it is sent on the host backend of the guest's kernel, answering with the
//! run's outcome. The guest boots once per `foliomm` command and is reused
//! for every file; its THP, shmem and hugetlb settings are its own, so a
//! guest run changes none of the host's. It has two NUMA nodes (a CPU and
//! 4 GiB each), so that migration between nodes can be refereed.

mod agent;
mod initramfs;

pub use agent::agent_main;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use foliomm_scenario::Outcome;

/// The argument that makes `foliomm` the guest's agent.
pub const AGENT_ARG: &str = "__guest-agent";

/// What to install where the guest cannot start.
const INSTALL: &str =
    "the guest backend needs qemu, a Linux 6.1 kernel and a static busybox: apt-get install qemu-system-x86 linux-image-6.1.0-47-amd64-unsigned busybox-static";

/// A request to the agent: one scenario file.
#[derive(serde::Serialize, serde::Deserialize)]
struct Request {
    name: String,
    text: String,
}

/// The agent's answer: the run's outcome, or why the file could not run.
#[derive(serde::Serialize, serde::Deserialize)]
enum Answer {
    Outcome(Box<Outcome>),
    Error(String),
}

/// A running guest.
pub struct Guest {
    qemu: Child,
    agent: BufReader<UnixStream>,
    dir: PathBuf,
    /// The guest kernel's release, as its agent reported it.
    pub release: String,
}

impl Guest {
    /// Boots the newest Linux 6.1 kernel in /boot under qemu and waits for
    /// its agent; `progress` hears each stage. An error names what is
    /// missing or what failed (the console log's path for a failed boot).
    pub fn boot(progress: impl Fn(&str)) -> Result<Guest, String> {
        let qemu = "qemu-system-x86_64";
        if Command::new(qemu).arg("--version").output().is_err() {
            return Err(format!("{qemu} not found: {INSTALL}"));
        }
        let kernel = newest_kernel("6.1.").ok_or_else(|| format!("no /boot/vmlinuz-6.1.*: {INSTALL}"))?;
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            return Err(format!("no /bin/busybox: {INSTALL}"));
        }
        let dir = std::env::temp_dir().join(format!("foliomm-guest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        progress(&format!("building the initramfs for {}", kernel.display()));
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let release =
            kernel.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("vmlinuz-")).unwrap_or("");
        let initrd = initramfs::build(&exe, busybox, release)?;
        std::fs::write(dir.join("initrd"), initrd).map_err(|e| format!("cannot write the initramfs: {e}"))?;
        let (sock, console) = (dir.join("agent.sock"), dir.join("console.log"));
        progress("booting the guest");
        let child = Command::new(qemu)
            // `-cpu max`: 1 GiB pages (pdpe1gb) among the CPU's features.
            .args(["-accel", "tcg", "-cpu", "max", "-m", "8192", "-smp", "2", "-display", "none", "-no-reboot"])
            // Two NUMA nodes, a CPU and 4 GiB each (the workers run on CPU
            // 0, node 0), for move_pages and the migration scenarios.
            .args(["-object", "memory-backend-ram,id=m0,size=4G", "-object", "memory-backend-ram,id=m1,size=4G"])
            .args(["-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,cpus=1,memdev=m1"])
            .arg("-kernel")
            .arg(&kernel)
            .arg("-initrd")
            .arg(dir.join("initrd"))
            .args(["-append", "console=ttyS0 quiet panic=-1"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-chardev")
            .arg(format!("socket,id=agent,path={},server=on,wait=off", sock.display()))
            .args(["-serial", "chardev:agent"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {qemu}: {e}"))?;
        let agent = match connect(&sock) {
            Ok(agent) => agent,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let mut guest = Guest { qemu: child, agent: BufReader::new(agent), dir, release: String::new() };
        let started = Instant::now();
        let ready = guest
            .line(Duration::from_secs(120))
            .map_err(|e| format!("the guest did not start ({e}); its console: {}", console.display()))?;
        guest.release = ready.strip_prefix("READY ").ok_or_else(|| format!("the agent said '{ready}'"))?.to_string();
        progress(&format!("guest Linux {} ready in {:.1} s", guest.release, started.elapsed().as_secs_f64()));
        Ok(guest)
    }

    /// Runs scenario `text` (from file `name`) in the guest. An error is
    /// the machinery's (the guest died, timed out or answered nonsense;
    /// the guest is then out of step and must not be used again), or a
    /// file the guest could not parse, with its reason.
    pub fn run(&mut self, name: &str, text: &str) -> Result<Outcome, String> {
        let req = serde_json::to_string(&Request { name: name.into(), text: text.into() }).unwrap();
        let stream = self.agent.get_mut();
        writeln!(stream, "{req}").and_then(|_| stream.flush()).map_err(|e| format!("the guest went away: {e}"))?;
        let line = self.line(Duration::from_secs(3600))?;
        match serde_json::from_str(&line) {
            Ok(Answer::Outcome(o)) => Ok(*o),
            Ok(Answer::Error(e)) => Err(e),
            Err(e) => {
                Err(format!("the guest answered something else ({e}): {}", line.chars().take(200).collect::<String>()))
            }
        }
    }

    /// The agent's next line, within `limit`.
    fn line(&mut self, limit: Duration) -> Result<String, String> {
        self.agent.get_ref().set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
        let mut line = String::new();
        match self.agent.read_line(&mut line) {
            Ok(0) => Err("the guest closed its port".into()),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(format!("no answer from the guest: {e}")),
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest Debian `/boot/vmlinuz-VERSION.0-N-amd64` (the plain flavour,
/// not `-cloud` or `-rt`) whose version starts with `version`, by ABI
/// number `N`.
fn newest_kernel(version: &str) -> Option<PathBuf> {
    let abi = |name: &str| -> Option<u32> {
        let rest = name.strip_prefix(&format!("vmlinuz-{version}"))?.strip_suffix("-amd64")?;
        rest.rsplit('-').next()?.parse().ok()
    };
    let names = std::fs::read_dir("/boot").ok()?.filter_map(|e| e.ok()?.file_name().into_string().ok());
    let newest = names.filter_map(|n| abi(&n).map(|a| (a, n))).max()?;
    Some(Path::new("/boot").join(newest.1))
}

/// Connects to qemu's socket for the agent's port, once qemu has made it.
fn connect(sock: &Path) -> Result<UnixStream, String> {
    let started = Instant::now();
    loop {
        match UnixStream::connect(sock) {
            Ok(s) => return Ok(s),
            Err(e) if started.elapsed() > Duration::from_secs(10) => {
                return Err(format!("cannot reach the guest's port {}: {e}", sock.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
