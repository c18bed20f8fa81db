//! The agent inside the guest: says `READY <release>` on its serial port,
//! then for each request line runs the scenario on the host backend of the
//! guest's kernel and answers with one line, the outcome as JSON.

use std::io::{BufRead, BufReader, Write};

use foliomm_scenario::{parse, run, RunOptions};

use super::{Answer, Request};
use crate::HostBackend;

/// Serves requests on the serial port `tty` until it closes; never returns.
pub fn agent_main(tty: &std::path::Path) -> ! {
    let port = match std::fs::OpenOptions::new().read(true).write(true).open(tty) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("foliomm guest agent: cannot open {}: {e}", tty.display());
            std::process::exit(1);
        }
    };
    let mut out = port.try_clone().expect("a second handle of the port");
    // Automatic NUMA balancing would move the guest's pages between its
    // two nodes behind the scenarios' backs (the model has none running):
    // off, in this throwaway guest.
    let _ = std::fs::write("/proc/sys/kernel/numa_balancing", "0");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let _ = writeln!(out, "READY {}", release.trim());
    for line in BufReader::new(port).lines() {
        let Ok(line) = line else { break };
        let answer = match serde_json::from_str::<Request>(&line) {
            Ok(req) => answer(&req),
            Err(e) => Answer::Error(format!("not a request: {e}")),
        };
        let _ = writeln!(out, "{}", serde_json::to_string(&answer).unwrap()).and_then(|_| out.flush());
    }
    std::process::exit(0)
}

fn answer(req: &Request) -> Answer {
    let steps = match parse(&req.text) {
        Ok(s) => s,
        Err(e) => return Answer::Error(format!("{}: {e}", req.name)),
    };
    match std::env::current_exe() {
        Ok(exe) => Answer::Outcome(Box::new(run(&steps, &mut HostBackend::new(exe), RunOptions::default()))),
        Err(e) => Answer::Error(format!("cannot find this program in the guest: {e}")),
    }
}
