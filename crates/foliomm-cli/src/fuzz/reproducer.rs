//! A scenario as a C program that replays it on the running kernel with the system calls of the host
//! backend's workers (`foliomm_host::worker`) and checks every read against the reference model's bytes.
//! Its first process, the supervisor, makes the `set` lines' sysfs changes (restored at exit and on
//! SIGINT, SIGTERM or SIGHUP, as
//! `foliomm_host::sysfs`), forks each process the scenario starts anew (`HostBackend::spawn`) and waits
//! until an exited one is gone (`HostBackend::exit`). A shared page holds whose turn it is (a step
//! index), the mappings' addresses and the files' descriptors (the interpreter's names are global).

use std::collections::HashSet;
use std::fmt::Write as _;

use foliomm::internals::folio::thp::{ShmemMode, ThpMode};
use foliomm::Errno;
use foliomm_host::{files::huge_size_bits, sysfs};
use foliomm_scenario::lang::{Cmd, MachineSetting, Only, Place, Step, Tunable};
use foliomm_scenario::op::FileKind;
use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

/// A self-contained C program (no foliomm needed) that replays the scenario
/// `text` on the running kernel and checks every read against the bytes the
/// reference model expected; it prints the first mismatch (line, address
/// offset, expected and actual byte) and exits 1, or prints "no mismatch" and exits 0.
/// It exits 2 when it cannot change a sysfs setting, 3 when a step ends otherwise than the scenario
/// says or a process dies. The bytes come from `foliomm_scenario::run` with `RunOptions::expected_reads`.
pub fn c_reproducer(text: &str) -> Result<String, String> {
    let steps = parse(text).map_err(|e| e.to_string())?;
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { expected_reads: true, ..Default::default() });
    let c = emit(&steps, &out.steps.iter().map(|o| o.expected.clone()).collect::<Vec<_>>())?;
    out.failure.map_or(Ok(c), |f| Err(format!("the model run fails at line {}: {}", f.line, f.message)))
}

/// The names of the C program's arrays of processes, mappings and files.
#[derive(Default)]
struct Names {
    procs: Vec<String>,
    maps: Vec<String>,
    files: Vec<String>,
}

fn index(v: &mut Vec<String>, name: &str) -> usize {
    v.iter().position(|n| n == name).unwrap_or_else(|| {
        v.push(name.to_string());
        v.len() - 1
    })
}

impl Names {
    /// A place's address and length as C expressions (the interpreter's `State::place`).
    fn place(&mut self, p: &Place) -> (String, String) {
        let k = index(&mut self.maps, &p.map);
        p.range.map_or((format!("S->addr[{k}]"), format!("S->len[{k}]")), |(s, e)| {
            (format!("S->addr[{k}] + {s}ULL"), format!("{}ULL", e - s))
        })
    }
}

/// `text` as a C string literal.
fn c_string(text: &str) -> String {
    let esc = |b: u8| match b {
        b'"' | b'\\' | b'?' => format!("\\{}", b as char),
        0x20..=0x7e => (b as char).to_string(),
        _ => format!("\\{b:03o}"),
    };
    format!("\"{}\"", text.bytes().map(esc).collect::<String>())
}

/// The sysfs writes of a `set thp`, `set shmem`, `set khugepaged` or `set hugetlb` line, as
/// `HostBackend::tune` makes them (`sysfs::set`, `sysfs::set_per_size`).
fn tune(t: &Tunable) -> String {
    let knob = |path: String, mode: &str| format!("knob({}, {}); ", c_string(&path), c_string(mode));
    let per_size = |o: u32, path: fn(Option<u32>) -> String, mode: &str, inherit: bool| {
        let (size, top, mode) = (c_string(&path(Some(o))), c_string(&path(None)), c_string(mode));
        format!("knob_size({o}, {size}, {top}, {mode}, {}); ", inherit as u8)
    };
    let (thp, shmem) = (sysfs::thp_path, sysfs::shmem_path);
    match t {
        Tunable::Thp { enabled, sizes } => (enabled.map(|m| knob(thp(None), m.name())).into_iter())
            .chain(sizes.iter().map(|&(o, m)| per_size(o, thp, m.name(), m == ThpMode::Inherit)))
            .collect(),
        Tunable::Shmem { enabled, sizes } => (enabled.map(|m| knob(shmem(None), m.name())).into_iter())
            .chain(sizes.iter().map(|&(o, m)| per_size(o, shmem, m.name(), m == ShmemMode::Inherit)))
            .collect(),
        Tunable::Khugepaged(knobs) => {
            knobs.iter().map(|(k, v)| knob(foliomm_host::khugepaged::path(k.name()), &v.to_string())).collect()
        }
        Tunable::HugetlbVmemmap(on) => knob(sysfs::HVO_PATH.to_string(), if *on { "1" } else { "0" }),
        Tunable::Hugetlb { pages, overcommit, size } => {
            let (dir, over) = (sysfs::hugetlb_path(*size, ""), overcommit.map_or(-1, |n| n as i64));
            format!("pool({}, {pages}L, {over}L);", c_string(dir.trim_end_matches('/')))
        }
    }
}

/// The flags of an `mmap` line, as the worker's `mmap` ORs them.
fn mmap_flags(c: &Cmd) -> String {
    let Cmd::Mmap { populate, fixed, shared, file, hugetlb, noreserve, locked, .. } = c else { unreachable!() };
    let mut flags = String::from(if *shared { "MAP_SHARED" } else { "MAP_PRIVATE" });
    let bits = [(*noreserve, "NORESERVE"), (file.is_none(), "ANONYMOUS"), (*fixed, "FIXED"), (*populate, "POPULATE")];
    for (_, f) in bits.into_iter().chain([(*locked, "LOCKED")]).filter(|b| b.0) {
        write!(flags, " | MAP_{f}").unwrap();
    }
    hugetlb.map_or(flags.clone(), |h| format!("{flags} | MAP_HUGETLB | {}", huge_size_bits(h)))
}

/// The C program of `steps`, `runs[i]` the bytes step `i` reads (`StepOutcome::expected`).
pub(crate) fn emit(steps: &[Step], runs: &[Vec<(u64, u8)>]) -> Result<String, String> {
    let (mut n, mut table, mut cases, mut arrays) = (Names::default(), String::new(), String::new(), String::new());
    let mut known = HashSet::new();
    for (i, s) in steps.iter().enumerate() {
        let bad = |why: &str| format!("line {} ({}): cannot translate: {why}", s.line, s.text);
        if s.thread.is_some() {
            return Err(bad("threads (P.t1: lines, parallel blocks) are not supported yet"));
        } else if s.fails.is_some() && s.fails_only != Only::default() {
            return Err(bad("a failure expected on some kernels or designs only"));
        }
        // Who runs it (-1: the supervisor); a process's first line starts it.
        let owner = s.proc.as_ref().map_or(-1, |p| index(&mut n.procs, p) as i64);
        let spawn = if s.proc.iter().any(|p| known.insert(p.clone())) { owner } else { -1 };
        let fd = |n: &mut Names, f: &str| format!("S->fd[{}]", index(&mut n.files, f));
        let code = match &s.cmd {
            Cmd::SetMachine(MachineSetting::MemoryAtLeast(_)) | Cmd::SetCheck(_) | Cmd::Measure(_) | Cmd::End => {
                "/* nothing to do */".into()
            }
            // The worker's children are reaped by the kernel (SIGCHLD ignored): `wait` does nothing.
            Cmd::Expect { .. } | Cmd::Wait(_) | Cmd::Observe { .. } | Cmd::Query { .. } | Cmd::ObservePin { .. } => {
                "/* nothing to do */".into()
            }
            Cmd::Tune(t) => tune(t),
            Cmd::Mmap { name, len, prot, at, align, file, offset, .. } => {
                let f = file.as_ref().map_or(-1, |f| index(&mut n.files, f) as i64);
                let (k, at, align, prot, flags) =
                    (index(&mut n.maps, name), at.unwrap_or(0), align.unwrap_or(0), prot.0, mmap_flags(&s.cmd));
                format!("do_mmap({k}, {at}ULL, {len}ULL, {prot}, {flags}, {f}, {offset}ULL, {align}ULL);")
            }
            Cmd::CreateFile { name, size, kind } => {
                let flags = match kind {
                    FileKind::Memfd => "MFD_ALLOW_SEALING".to_string(),
                    FileKind::Hugetlbfs(h) => format!("MFD_ALLOW_SEALING | MFD_HUGETLB | {}", huge_size_bits(*h)),
                    FileKind::Tmpfs { .. } => return Err(bad("tmpfs files (on a mount of their own)")),
                };
                format!("do_memfd({}, {size}ULL, {flags});", index(&mut n.files, name))
            }
            Cmd::Close(f) => format!("CALL(close({}));", fd(&mut n, f)),
            Cmd::Seal { file, seals } => format!("CALL(fcntl({}, F_ADD_SEALS, {seals}));", fd(&mut n, file)),
            Cmd::Pwrite { file, offset: o, len, val } => format!("do_pwrite({}, {o}, {len}, {val});", fd(&mut n, file)),
            Cmd::Truncate { file, size } => format!("CALL(ftruncate({}, {size}LL));", fd(&mut n, file)),
            Cmd::Fallocate { file, offset: o, len, keep_size } => {
                let mode = if *keep_size { "FALLOC_FL_KEEP_SIZE" } else { "0" };
                format!("CALL(fallocate({}, {mode}, {o}LL, {len}LL));", fd(&mut n, file))
            }
            Cmd::Punch { file, offset: o, len } => {
                let (fd, mode) = (fd(&mut n, file), "FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE");
                format!("CALL(fallocate({fd}, {mode}, {o}LL, {len}LL));")
            }
            Cmd::Munmap(p) | Cmd::Mprotect(p, _) | Cmd::Madvise(p, _) | Cmd::Mlock(p, _) => {
                let (a, l) = n.place(p);
                let (call, arg) = match &s.cmd {
                    Cmd::Mprotect(_, prot) => ("mprotect", format!(", {}", prot.0)),
                    Cmd::Madvise(_, adv) => ("madvise", format!(", MADV_{}", adv.name().to_uppercase())),
                    Cmd::Mlock(_, lock) => (if *lock { "mlock" } else { "munlock" }, String::new()),
                    _ => ("munmap", String::new()),
                };
                format!("CALL({call}((void *)({a}), {l}{arg}));")
            }
            Cmd::Mremap { name, from, size, to, dontunmap } => {
                let (a, l) = n.place(from);
                let new_len = size.map_or(l.clone(), |s| format!("{s}ULL"));
                let to = to.as_ref().map_or(-1, |t| index(&mut n.maps, t) as i64);
                format!("do_mremap({}, {a}, {l}, {new_len}, {to}, {});", index(&mut n.maps, name), *dontunmap as u8)
            }
            Cmd::Fork(child) => {
                known.insert(child.clone());
                format!("return do_fork({});", index(&mut n.procs, child))
            }
            Cmd::Exit => "_exit(0);".into(),
            Cmd::Write { place, val, every_byte } => {
                let ((a, l), val) = (n.place(place), val.unwrap_or((s.line % 251 + 1) as u8));
                format!("do_write({a}, {l}, {}, {val}, 0);", if *every_byte { 3 } else { 2 })
            }
            Cmd::Pattern { place, seed } => {
                let ((a, l), k) = (n.place(place), index(&mut n.maps, &place.map));
                format!("do_write({a}, {l}, 4, {seed}, S->addr[{k}]);")
            }
            Cmd::Read { place, every_byte } => {
                let ((a, l), want) = (n.place(place), runs.get(i).map_or(&[][..], |r| &r[..]));
                let items: Vec<String> = want.iter().map(|(c, v)| format!("{{{c}ULL, 0x{v:02x}}}")).collect();
                let items = if items.is_empty() { "{0, 0}".to_string() } else { items.join(", ") };
                writeln!(arrays, "static const struct run R{i}[] = {{{items}}};").unwrap();
                format!("do_read({a}, {l}, {}, R{i}, {});", *every_byte as u8, want.len())
            }
            Cmd::Pin { .. } | Cmd::Unpin(_) => return Err(bad("GUP references (sys/gup.rs) are not supported yet")),
            // Machine settings but `set memory at least`, pread (no expected bytes), unlink, System V.
            _ => return Err(bad("not supported")),
        };
        let want = s.fails.map_or("0", |e| if e == Errno::SIGBUS { "FMM_SIGBUS" } else { e.name() });
        writeln!(
            table,
            "  {{{}, {}, {owner}, {spawn}, {}, {want}}},",
            s.line,
            c_string(&s.text),
            (s.cmd == Cmd::Exit) as u8
        )
        .unwrap();
        writeln!(cases, "  case {i}: /* line {}: {} */\n    {code}\n    break;", s.line, s.text.replace("*/", "* /"))
            .unwrap();
    }
    let (np, nm, nf, ns) = (n.procs.len(), n.maps.len(), n.files.len(), steps.len());
    let names: String = n.procs.iter().map(|p| c_string(p) + ", ").collect();
    Ok(format!(
        "{HEAD}enum {{ NPROC = {np}, NMAP = {nm}, NFILE = {nf}, NSTEPS = {ns} }};\n\
        static const char *const PNAME[] = {{{names}0}};\nstatic const struct st ST[] = {{\n{table}  {{0}}\n}};\n\
        {arrays}{BODY}static int step(int i) {{\n  switch (i) {{\n{cases}  }}\n  return 0;\n}}\n"
    ))
}

/// The C program's headers and types.
const HEAD: &str = r##"/* A foliomm scenario as a C program: cc -O1 -Wall -o repro repro.c && ./repro */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
#define FMM_SIGBUS 1000 /* an access the kernel answers with SIGBUS */
#define CHUNK (64ULL << 20) /* the interpreter's READ_CHUNK */
#define CALL(x) ok((x) == -1 ? errno : 0)
typedef unsigned long long u64;
struct run { u64 n; unsigned char v; };
struct st { int line; const char *text; int owner, spawn, exit, want; }; /* a step: who runs it, what it expects */
"##;

/// The C program's runtime: the worker's calls, the turns, `main`.
const BODY: &str = r##"struct shared { int turn, failed, pid[NPROC + 1], fd[NFILE + 1]; u64 addr[NMAP + 1], len[NMAP + 1]; } *S;
static int me = -1, cur, want, step(int i); /* this scenario process (-1: the supervisor), the step, its errno */
int alive(int p) { return S->pid[p] > 0 && (kill(S->pid[p], 0) == 0 || errno != ESRCH); }
void finish(void) { /* a process ends; the supervisor waits until all have, as HostBackend::exit */
  for (int p = 0; me < 0 && p < NPROC; p++) while (alive(p)) sched_yield();
  me >= 0 ? _exit(0) : exit(S->failed ? S->failed : (printf("no mismatch\n"), 0)); }
void fail(int code, const char *fmt, ...) { va_list ap;
  printf("%sline %d (%s): ", code == 1 ? "MISMATCH " : "", ST[cur].line, ST[cur].text);
  va_start(ap, fmt), vprintf(fmt, ap), va_end(ap), printf("\n");
  S->failed = S->failed ? S->failed : code, finish(); }
const char *ename(int e) { return e == FMM_SIGBUS ? "SIGBUS" : e ? strerror(e) : "success"; }
/* The interpreter's outcome(): 1 to go on, 0 after the failure the step expects. */
int ok(int e) { if (e != want) fail(3, "ended with %s, expected %s", ename(e), ename(want)); return !e; }
/* procfs::maps() and check_access(): EFAULT outside a VMA, EACCES, SIGBUS past the end of its file. */
struct vma { u64 s, e, off, ino; int r, w; } V[8192]; int NV; char mbuf[1 << 20];
void load_maps(void) {
  int fd = open("/proc/self/maps", O_RDONLY); ssize_t n = 0, r; char *l = mbuf, *p;
  while (n < (ssize_t)sizeof mbuf - 1 && (r = read(fd, mbuf + n, sizeof mbuf - 1 - n)) > 0) n += r;
  for (close(fd), mbuf[n] = 0, NV = 0; *l && NV < 8192; l = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
    struct vma *v = &V[NV++];
    v->s = strtoull(l, &p, 16), v->e = strtoull(p + 1, &p, 16), v->r = p[1] == 'r', v->w = p[2] == 'w';
    v->off = strtoull(p + 6, &p, 16), v->ino = strtoull(strchr(p + 1, ' '), &p, 10); } }
struct vma *vma_of(u64 a) { for (int i = 0; i < NV; i++) if (V[i].s <= a && a < V[i].e) return &V[i]; return 0; }
int check_access(u64 a, int write) {
  struct vma *v = vma_of(a); struct stat st; char path[96];
  if (!v || !(write ? v->w : v->r || v->w)) return v ? EACCES : EFAULT;
  snprintf(path, sizeof path, "/proc/self/map_files/%llx-%llx", v->s, v->e);
  u64 size = !v->ino || stat(path, &st) ? 0 : (u64)st.st_size;
  return v->ino && v->off + (a & ~4095ULL) - v->s >= (size + 4095) / 4096 * 4096 ? FMM_SIGBUS : 0; }
/* The worker's fault_in_file_page(): MADV_POPULATE_(READ|WRITE) of a file page not present (pagemap). */
int fault_in(u64 a, int write) {
  struct vma *v = vma_of(a); u64 e = 0;
  int fd = open("/proc/self/pagemap", O_RDONLY), adv = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (pread(fd, &e, 8, a / 4096 * 8) != 8) e = 0;
  if (close(fd), !v || !v->ino || e >> 63 || !madvise((void *)(a & ~4095ULL), 4096, adv)) return 0;
  return errno == EFAULT ? FMM_SIGBUS : errno; }
static const struct run *R; static u64 RN, ri, rused, nread; static int every_g, cmp; /* the read under way */
void check_byte(unsigned char got) {
  while (ri < RN && rused == R[ri].n) ri++, rused = 0;
  if (ri == RN) fail(3, "the read returns more bytes than the reference model has");
  if (rused++, nread++, got != R[ri].v) fail(1, "byte at offset 0x%llx of the read: expected 0x%02x, got 0x%02x",
                                            every_g ? nread - 1 : (nread - 1) * 4096, R[ri].v, got); }
/* The worker's access_memory(); mode 0/1: read a byte per page/every byte, 2/3: write them, 4: a pattern. */
int access_mem(u64 addr, u64 len, int mode, unsigned char val, u64 origin) {
  int every = mode == 1 || mode >= 3, write = mode >= 2, e;
  u64 end = addr + len, at = every ? addr : addr & ~4095ULL, next, stop;
  for (load_maps(); at < end; at = next) {
    if ((e = check_access(at, write)) || (e = fault_in(at, write))) return e;
    next = every ? (at / 4096 + 1) * 4096 : at + 4096, stop = !every ? at + 1 : next < end ? next : end;
    for (u64 a = at, o = a - origin; a < stop; a++, o++) {
      volatile unsigned char *p = (volatile unsigned char *)a;
      if (mode == 2 || mode == 3) *p = val;
      else if (mode == 4) *p = (unsigned char)(((o >> 12) * 0x9e37ULL) ^ ((o & 0xfff) * 7)) ^ val;
      else if (cmp) check_byte(*p);
      else (void)*p; } }
  return 0; }
/* The interpreter's read_step(): in chunks, each checked against the reference model. */
void do_read(u64 a, u64 l, int every, const struct run *runs, u64 n) {
  u64 chunk = !want ? CHUNK : l ? l : 1, len;
  R = runs, RN = n, ri = rused = nread = 0, every_g = every, cmp = !want;
  for (u64 done = 0; done < l || (l == 0 && done == 0); done += len ? len : 1)
    if (len = l - done < chunk ? l - done : chunk, !ok(access_mem(a + done, len, every, 0, 0))) return;
  while (ri < RN && rused == R[ri].n) ri++, rused = 0;
  if (ri < RN) fail(3, "the read returns fewer bytes than the reference model has"); }
/* The interpreter's write(): in 64 MiB chunks, page by page where ENOMEM is expected. */
void do_write(u64 a, u64 l, int mode, unsigned char val, u64 origin) {
  u64 chunk = !want ? CHUNK : want == ENOMEM ? 4096 : l ? l : 1, len;
  for (u64 at = a, e = 0; at < a + l && !e; at += len)
    if (len = ((at / chunk + 1) * chunk < a + l ? (at / chunk + 1) * chunk : a + l) - at,
        (e = access_mem(at, len, mode, val, origin)) || at + len == a + l) ok(e); }
/* The interpreter's mmap_step(), the worker's mmap(): a PROT_NONE reservation of len + align, the
   aligned mapping over it with MAP_FIXED, the rest unmapped. */
void do_mmap(int k, u64 at, u64 len, int prot, int flags, int file, u64 off, u64 align) {
  int fd = file < 0 ? -1 : S->fd[file], e; u64 total = len + align, raw, addr;
  void *p = align ? mmap(0, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : mmap((void *)at, total, prot, flags, fd, off);
  if (!ok(p == MAP_FAILED ? errno : 0)) return;
  raw = (u64)p, addr = align ? (raw + align - 1) / align * align : raw;
  if (align && ((e = mmap((void *)addr, len, prot, flags | MAP_FIXED, fd, off) == MAP_FAILED ? errno : 0) || want)) {
    if (munmap((void *)raw, total)) fail(3, "trimming the aligned mapping: %s", strerror(errno));
    return (void)ok(e); }
  if ((addr > raw && munmap((void *)raw, addr - raw)) ||
      (raw + total > addr + len && munmap((void *)(addr + len), raw + total - addr - len)))
    fail(3, "trimming the aligned mapping: %s", strerror(errno));
  S->addr[k] = addr, S->len[k] = len; }
/* The worker's mremap(): MREMAP_MAYMOVE, with MREMAP_FIXED onto another mapping. */
void do_mremap(int k, u64 a, u64 l, u64 nl, int to, int dontunmap) { int flags = MREMAP_MAYMOVE | (to >= 0 ? MREMAP_FIXED : 0) | (dontunmap ? MREMAP_DONTUNMAP : 0);
  void *p = mremap((void *)a, l, nl, flags, to >= 0 ? (void *)S->addr[to] : 0);
  if (ok(p == MAP_FAILED ? errno : 0)) S->addr[k] = (u64)p, S->len[k] = nl; }
/* files::create_file(): memfd_create("foliomm") and ftruncate(). */
void do_memfd(int k, u64 size, unsigned flags) { int fd = syscall(SYS_memfd_create, "foliomm", flags), e = fd < 0 ? errno : ftruncate(fd, size) ? errno : 0;
  if (ok(e)) S->fd[k] = fd; }
/* The interpreter's pwrite_step(): pwrite() in 64 MiB pieces. */
void do_pwrite(int fd, u64 off, u64 len, unsigned char v) {
  for (u64 done = 0, n; done < len; done += n) {
    char *buf = malloc(n = len - done < CHUNK ? len - done : CHUNK);
    ssize_t w = buf ? pwrite(fd, memset(buf, v, n), n, off + done) : (errno = ENOMEM, -1); int e = w < 0 ? errno : 0;
    if (free(buf), (e || done + n == len) && !ok(e)) return;
    if ((u64)w != n) fail(3, "pwrite wrote %llu of %llu bytes", done + w, len); } }
int do_fork(int child) { pid_t c = fork(); /* the worker's fork(): the child goes on as `child` */
  if (c == 0) return me = child, S->pid[me] = getpid(), 1;
  return ok(c < 0 ? errno : 0) ? S->pid[child] = c, 0 : 0; }
/* sysfs.rs: set() saves a setting's old value before its first change; restore_all() at exit. */
static char SP[32][160], SV[32][32]; static int NS;
int read_word(const char *path, char *out, size_t n) { /* sysfs::read_selected() */
  char b[512], *w, *end; int fd = open(path, O_RDONLY); ssize_t r = read(fd, b, sizeof b - 1);
  if (close(fd), r < 0) return -1;
  if (b[r] = 0, (w = strchr(b, '['))) end = strchr(++w, ']');
  else w = b + strspn(b, " \n"), end = w + strcspn(w, " \n");
  return end ? snprintf(out, n, "%.*s", (int)(end - w), w), 0 : -1; }
int put(const char *path, const char *v) { int fd = open(path, O_WRONLY), r = write(fd, v, strlen(v)) == (ssize_t)strlen(v), e = errno;
  return close(fd), errno = e, r ? 0 : -1; }
void knob(const char *path, const char *v) {
  int i = 0; while (i < NS && strcmp(SP[i], path)) i++;
  if (i == NS && (NS == 32 || read_word(path, SV[NS], sizeof SV[0]))) fail(2, "cannot read %s", path);
  if (i == NS) snprintf(SP[NS++], sizeof SP[0], "%s", path);
  if (put(path, v)) fail(2, "cannot write '%s' to %s: %s", v, path, strerror(errno)); }
void knob_size(int order, const char *size, const char *top, const char *v, int inherit) { /* sysfs::set_per_size() */
  if (access(size, F_OK) == 0) knob(size, v);
  else if (order != 9) fail(2, "this kernel has no %d KiB size (%s)", 4 << order, size);
  else if (!inherit) knob(top, v); }
void pool(const char *dir, long pages, long over) { /* HostBackend::tune() of a hugetlb pool */
  char p[200], q[200], v[32], s[32];
  snprintf(p, sizeof p, "%s/nr_overcommit_hugepages", dir), snprintf(v, sizeof v, "%ld", over);
  if (snprintf(q, sizeof q, "%s/surplus_hugepages", dir), over >= 0) knob(p, v);
  snprintf(p, sizeof p, "%s/nr_hugepages", dir), snprintf(v, sizeof v, "%ld", pages), knob(p, v);
  if (read_word(p, v, sizeof v) || read_word(q, s, sizeof s) || atol(v) - atol(s) != pages)
    fail(2, "the host kernel gave %ld of %ld huge pages", atol(v) - atol(s), pages); }
static pid_t SUPERVISOR; /* only it puts settings back */
void restore(void) { if (getpid() == SUPERVISOR) while (NS > 0) NS--, put(SP[NS], SV[NS]); } /* newest first */
/* SIGINT, SIGTERM, SIGHUP to the supervisor: the scenario's processes go first (their huge pages
   would keep a pool from shrinking), then the settings come back (sysfs::restore_all()); then it
   dies of the signal. Another process just dies of it. */
void on_signal(int sig) {
  for (int p = 0; getpid() == SUPERVISOR && p < NPROC; p++) if (S->pid[p] > 0) kill(S->pid[p], SIGKILL);
  for (int p = 0; getpid() == SUPERVISOR && p < NPROC; p++) while (alive(p)) sched_yield();
  restore(), signal(sig, SIG_DFL), raise(sig); }
/* Waits for step i's turn; the supervisor notices a process that died. */
void wait_turn(int i) {
  for (int t; (t = __atomic_load_n(&S->turn, __ATOMIC_ACQUIRE)) != i; sched_yield()) {
    if (S->failed) finish();
    if (me < 0 && t < NSTEPS && ST[t].owner >= 0 && !ST[t].exit && S->pid[ST[t].owner] > 0 && !alive(ST[t].owner)
        && __atomic_load_n(&S->turn, __ATOMIC_ACQUIRE) == t)
      cur = t, fail(3, "process %s died", PNAME[ST[t].owner]); }
  if (cur = i, want = ST[i].want, S->failed) finish(); }
int main(void) {
  if ((S = mmap(0, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) == MAP_FAILED) return 3;
  setvbuf(stdout, 0, _IONBF, 0), signal(SIGCHLD, SIG_IGN), atexit(restore); /* SIGCHLD: as the worker */
  SUPERVISOR = getpid(), signal(SIGINT, on_signal), signal(SIGTERM, on_signal), signal(SIGHUP, on_signal);
  for (int i = 0; i < NSTEPS; i++) {
    if (me < 0 && ST[i].spawn >= 0) { /* HostBackend::spawn(): a process of its own */
      pid_t c = (wait_turn(i), fork());
      if (c < 0) fail(3, "cannot create process %s: %s", PNAME[ST[i].spawn], strerror(errno));
      S->pid[ST[i].spawn] = c ? c : getpid(), me = c ? me : ST[i].spawn; }
    if (ST[i].owner == me) {
      if (wait_turn(i), !step(i)) __atomic_store_n(&S->turn, i + 1, __ATOMIC_RELEASE);
    } else if (me < 0 && ST[i].exit) { /* HostBackend::exit(): until the process is gone */
      for (wait_turn(i); alive(ST[i].owner);) sched_yield();
      __atomic_store_n(&S->turn, i + 1, __ATOMIC_RELEASE); } }
  wait_turn(NSTEPS), finish(); }
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const SCENARIO: &str = "P: a = mmap 2M rw align 2M\nP: write a = 0x11\nP: fork C\nC: write a[0..64K] = 0x22\n\
                            P: verify a\nC: read a\nC: exit\nP: wait C\n";

    /// Compiles `c` with `cc -O1 -Wall` (no warning allowed), runs it for at most 2 minutes: its status and output.
    fn compile_and_run(c: &str, name: &str) -> (Option<i32>, String) {
        let dir = std::env::temp_dir().join(format!("foliomm-repro-{}-{name}", std::process::id()));
        let (src, exe) = (dir.join("repro.c"), dir.join("repro"));
        std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&src, c)).unwrap();
        let cc = Command::new("cc").arg("-O1").arg("-Wall").arg("-o").arg(&exe).arg(&src).output().unwrap();
        assert!(cc.status.success() && cc.stderr.is_empty(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
        let out = Command::new("timeout").arg("120").arg(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    #[test]
    fn the_program_holds_the_expected_bytes_as_arrays() {
        let c = c_reproducer(SCENARIO).unwrap();
        // P's verify: each page's first byte 0x11, the rest zeros; C's read, a byte per page: its 16, then P's.
        assert!(c.contains("static const struct run R4[] = {{1ULL, 0x11}, {4095ULL, 0x00}, {1ULL, 0x11},"), "{c}");
        assert!(c.contains("static const struct run R5[] = {{16ULL, 0x22}, {496ULL, 0x11}};"), "{c}");
        assert!(c.contains("do_mmap(0, 0ULL, 2097152ULL, 3, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0ULL, 2097152ULL);"));
        assert!(c.contains("return do_fork(1);") && c.contains("_exit(0);"));
        let e = c_reproducer("P: a = mmap 64K\nP.t1: write a\n").unwrap_err();
        assert!(e.starts_with("line 2 (P.t1: write a): cannot translate"), "{e}");
    }

    #[test]
    fn the_program_runs_on_the_host_and_finds_a_tampered_byte() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
        if !cfg!(target_os = "linux") || !root || Command::new("cc").arg("--version").output().is_err() {
            return eprintln!("skipped: running the reproducer needs Linux, root and cc");
        }
        let (status, out) = compile_and_run(&c_reproducer(SCENARIO).unwrap(), "ok");
        assert_eq!((status, out.trim()), (Some(0), "no mismatch"), "{out}");
        let (steps, opts) = (parse(SCENARIO).unwrap(), RunOptions { expected_reads: true, ..Default::default() });
        let mut runs: Vec<_> =
            run(&steps, &mut ModelBackend::new(), opts).steps.into_iter().map(|o| o.expected).collect();
        runs[4][2].1 = 0x12; // the first byte of the second page of P's verify
        let (status, out) = compile_and_run(&emit(&steps, &runs).unwrap(), "tampered");
        let want = "MISMATCH line 5 (P: verify a): byte at offset 0x1000 of the read: expected 0x12, got 0x11";
        assert!(status == Some(1) && out.contains(want), "exit {status:?}: {out}");
    }
}
