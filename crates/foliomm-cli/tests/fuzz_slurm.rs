//! `foliomm fuzz` spread by a Slurm job array: a one-node Slurm (munged,
//! slurmctld and slurmd from Debian's slurm-wlm, configured for this host
//! in a temporary directory, on ports of their own) runs `sbatch --array`
//! over four shards, and their merged summary equals one process's run of
//! the same seeds. Only with `FOLIOMM_SLURM_TEST=1`, as root.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The daemons of a private one-node cluster; stopped when dropped.
struct Cluster {
    dir: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        std::fs::create_dir_all(dir.join("state")).unwrap();
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        let d = dir.display();
        let key = dir.join("munge.key");
        std::fs::copy("/etc/munge/munge.key", &key).expect("munge's key (apt-get install slurm-wlm makes it)");
        run("chmod", &["700", &d.to_string()]);
        let munged = format!(
            "--force --socket={d}/munge.sock --key-file={d}/munge.key --log-file={d}/munged.log \
             --pid-file={d}/munged.pid --seed-file={d}/munged.seed"
        );
        run("munged", &munged.split(' ').collect::<Vec<_>>());
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
        let port = 20000 + (std::process::id() % 20000) as u16 * 2;
        let conf = format!(
            "ClusterName=foliomm\nSlurmctldHost={host}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={d}/munge.sock\nCredType=cred/munge\n\
             SlurmctldPort={port}\nSlurmdPort={}\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\nMpiDefault=none\n\
             JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             NodeName={host} CPUs=2 State=UNKNOWN\n\
             PartitionName=fuzz Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            port + 1,
            host = host.trim()
        );
        std::fs::write(dir.join("slurm.conf"), conf).unwrap();
        let cluster = Cluster { dir: dir.to_path_buf() };
        cluster.slurm("slurmctld", &["-c"]);
        cluster.slurm("slurmd", &[]);
        cluster
    }

    /// Runs a Slurm command against this cluster's configuration.
    fn slurm(&self, cmd: &str, args: &[&str]) -> std::process::Output {
        let out = Command::new(cmd).args(args).env("SLURM_CONF", self.dir.join("slurm.conf")).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for daemon in ["slurmctld", "slurmd"] {
            if let Ok(pid) = std::fs::read_to_string(self.dir.join(format!("{daemon}.pid"))) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        let sock = format!("--socket={}/munge.sock", self.dir.display());
        let _ = Command::new("munged").args(["--stop", &sock]).status();
    }
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_slurm_array_of_shards_merges_to_one_run() {
    if std::env::var("FOLIOMM_SLURM_TEST").as_deref() != Ok("1") {
        eprintln!("skipped: set FOLIOMM_SLURM_TEST=1 to start a one-node Slurm (apt-get install slurm-wlm; root)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("foliomm-fuzz-slurm-{}", std::process::id()));
    let cluster = Cluster::start(&dir.join("cluster"));
    let exe = env!("CARGO_BIN_EXE_foliomm");
    let d = dir.display();
    let job = format!(
        "{exe} fuzz --seeds 0..24 --set 'debug reuse-shared' --shard $SLURM_ARRAY_TASK_ID/4 --json \
         --findings {d}/f$SLURM_ARRAY_TASK_ID > {d}/s$SLURM_ARRAY_TASK_ID.json; \
         test -s {d}/s$SLURM_ARRAY_TASK_ID.json"
    );
    // (fuzz exits 1 with a finding, as this broken model has; the task
    // succeeds if it wrote its summary.)
    cluster.slurm("sbatch", &["--wait", "--array=0-3", "-o", &format!("{d}/log%a"), "--wrap", &job]);
    let files: Vec<_> = (0..4).map(|i| dir.join(format!("s{i}.json"))).collect();
    let merged = Command::new(exe).args(["fuzz", "merge", "--json"]).args(&files).output().unwrap();
    let merged: serde_json::Value = serde_json::from_slice(&merged.stdout).unwrap();
    let one = Command::new(exe)
        .args(["fuzz", "--seeds", "0..24", "--set", "debug reuse-shared", "--json", "--findings"])
        .arg(dir.join("one"))
        .output()
        .unwrap();
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    for key in ["workloads", "findings", "coverage", "features"] {
        assert_eq!(merged[0][key], one[key], "{key}");
    }
    assert!(one["findings"]["model-broken"].as_u64().unwrap_or(0) > 0, "{one}");
    drop(cluster);
    std::fs::remove_dir_all(&dir).unwrap();
}
