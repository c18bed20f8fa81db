//! The guest's initramfs, built at run time from this machine's files: the
//! running `foliomm` binary, a static busybox, the shared libraries both
//! need (as `ldd` lists them), the kernel's zram modules where it has
//! them (for `set swap`), and an `/init` that mounts the kernel's file
//! systems, loads the modules and starts the agent on the second serial
//! port. Written as
//! a `newc` cpio archive, the format the kernel unpacks.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the agent listens inside the guest.
pub(super) const AGENT_TTY: &str = "/dev/ttyS1";

/// The archive's bytes, for `qemu -initrd`.
pub(super) fn build(foliomm: &Path, busybox: &Path, release: &str) -> Result<Vec<u8>, String> {
    let mut cpio = Cpio::default();
    for dir in ["bin", "proc", "sys", "dev", "tmp", "modules"] {
        cpio.dir(dir);
    }
    // zram and what it needs, in load order (`modules.dep`); absent ones
    // leave the guest without swap (`set swap` is then refused).
    let tree = Path::new("/lib/modules").join(release).join("kernel");
    for (name, path) in [("zsmalloc", "mm/zsmalloc.ko"), ("zram", "drivers/block/zram/zram.ko")] {
        if let Ok(data) = std::fs::read(tree.join(path)) {
            cpio.file(&format!("modules/{name}.ko"), &data, 0o644);
        }
    }
    cpio.file("bin/foliomm", &read(foliomm)?, 0o755);
    cpio.file("bin/busybox", &read(busybox)?, 0o755);
    let mut libs: Vec<PathBuf> = libraries(foliomm)?.into_iter().chain(libraries(busybox)?).collect();
    libs.sort();
    libs.dedup();
    let mut dirs = std::collections::BTreeSet::new();
    for lib in libs {
        let name = lib.to_string_lossy().trim_start_matches('/').to_string();
        // The kernel's unpacker makes no parent directories of its own.
        let parents = name.match_indices('/').map(|(i, _)| name[..i].to_string());
        for dir in parents.filter(|d| dirs.insert(d.clone())) {
            cpio.dir(&dir);
        }
        cpio.file(&name, &read(&lib)?, 0o755);
    }
    cpio.file("init", init_script().as_bytes(), 0o755);
    Ok(cpio.finish())
}

/// `/init`: the kernel's file systems, the agent's port in raw mode, then
/// the agent; the guest powers off when the agent ends.
fn init_script() -> String {
    format!(
        "#!/bin/busybox sh\n\
         /bin/busybox mount -t proc proc /proc\n\
         /bin/busybox mount -t sysfs sys /sys\n\
         /bin/busybox mount -t devtmpfs dev /dev\n\
         /bin/busybox mount -t tmpfs tmp /tmp\n\
         /bin/busybox mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null\n\
         for m in zsmalloc zram; do /bin/busybox insmod /modules/$m.ko 2>/dev/null; done\n\
         /bin/busybox stty -F {AGENT_TTY} raw -echo 115200\n\
         /bin/foliomm {} {AGENT_TTY}\n\
         /bin/busybox poweroff -f\n",
        super::AGENT_ARG
    )
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

/// The shared libraries `binary` loads, by `ldd` (none for a static one).
fn libraries(binary: &Path) -> Result<Vec<PathBuf>, String> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| format!("cannot run ldd on {}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Lines "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
    // "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
    let paths = text.lines().filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')));
    Ok(paths.map(PathBuf::from).collect())
}

/// A `newc` archive being written.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn dir(&mut self, name: &str) {
        self.entry(name, &[], 0o040_755);
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, data, 0o100_000 | perm);
    }

    /// One entry: the 110-byte header of 13 hex fields after the magic, the
    /// name with its NUL, then the data, each padded to 4 bytes.
    fn entry(&mut self, name: &str, data: &[u8], mode: u32) {
        self.ino += 1;
        let fields = [self.ino, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        let _ = write!(self.out, "070701");
        for f in fields {
            let _ = write!(self.out, "{f:08x}");
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", &[], 0);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_a_newc_header_then_name_and_data_padded_to_four() {
        let mut c = Cpio::default();
        c.file("init", b"hello", 0o755);
        let out = c.finish();
        assert_eq!(&out[..6], b"070701");
        assert_eq!(&out[6 + 8..6 + 16], b"000081ed", "mode: a regular file, rwxr-xr-x");
        assert_eq!(&out[6 + 6 * 8..6 + 7 * 8], b"00000005", "file size");
        assert_eq!(&out[110..115], b"init\0");
        assert_eq!(&out[116..121], b"hello", "the data starts at the next multiple of 4");
        assert!(out.len().is_multiple_of(4));
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
