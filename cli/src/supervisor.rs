//! The supervisor: a small process between zkfence and CMD, so CMD never outlives the lock.
//!
//! zkfence re-executes itself in this mode (`zkfence __zkfence-supervise ...`, never typed by
//! a user) once it holds the lease. The supervisor starts CMD in a process group of its own
//! and, with no async runtime and nothing else to do, enforces three rules whatever becomes
//! of zkfence:
//!
//! - **zkfence died** (SIGKILL, the OOM killer, a crash): the kernel tells us with
//!   `PR_SET_PDEATHSIG`, and the socket to zkfence reads end-of-file. CMD's group gets
//!   SIGKILL at once: the lock's session will expire, and CMD must be gone before.
//! - **The deadline passes**: the supervisor keeps its own copy of the lease's deadline,
//!   which zkfence moves each time its lease clock moves. Deadlines travel as absolute
//!   `CLOCK_BOOTTIME` instants (one clock for every process on the machine, and one that
//!   goes on while the machine is suspended, as the servers' clocks do), so neither a slow
//!   spawn, nor a stall of zkfence between reading the clock and writing, nor a suspend can
//!   move one later; a deadline already past when CMD would start means CMD is not started.
//!   The supervisor sleeps on a `CLOCK_BOOTTIME` timer, which fires at once on a wake-up
//!   from a suspend that outlasted it. If
//!   zkfence is frozen (SIGSTOP, a stall, swap) or the lease is running out, no extension
//!   comes: CMD's group gets SIGTERM at `deadline - min(grace, half the lease left at the
//!   last extension)` and SIGKILL at the deadline, when the lease clock says the ensemble
//!   could start expiring the session.
//! - **Signals go to the group**, and CMD counts as finished only when its whole group is
//!   gone (the supervisor is a child subreaper, so orphaned members are reaped here).
//!   A member the supervisor may not signal (it changed its user: `sudo`, a setuid
//!   program) survives the group kill; once SIGKILL has gone out and only such members
//!   remain, the supervisor names them and reports `foreign` instead of waiting forever.
//!
//! The protocol on the socket is one line per message. zkfence → supervisor:
//! `until NS` (the new deadline, nanoseconds on `CLOCK_BOOTTIME`), `signal N`, `lost`.
//! Supervisor → zkfence: `started PID`, `failed CODE TEXT`, `done code|signal N WHY` with
//! WHY one of `exited`, `deadline`, `lost`, `parent`, `foreign`.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use crate::clock::BootInstant as Instant;

/// The hidden first argument that selects this mode.
pub const MODE: &str = "__zkfence-supervise";

/// The signal the kernel sends us when zkfence dies (`PR_SET_PDEATHSIG`). A plain SIGKILL
/// would kill the supervisor before it could kill CMD's group.
const PARENT_DEATH: libc::c_int = libc::SIGUSR2;

/// How often to look again whether stragglers of CMD's group are gone after CMD itself
/// exited (no event tells us when a non-child leaves the group).
const STRAGGLER_POLL: Duration = Duration::from_millis(20);

static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static PARENT_SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // SAFETY: only async-signal-safe calls (errno access, write(2)) on a valid fd.
    unsafe {
        let errno = *libc::__errno_location();
        if sig == PARENT_DEATH {
            PARENT_SIGNALLED.store(true, Ordering::SeqCst);
        }
        let fd = WAKE_FD.load(Ordering::SeqCst);
        if fd >= 0 {
            let byte = 1u8;
            libc::write(fd, &byte as *const u8 as *const libc::c_void, 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// Why the supervisor ended CMD (or saw it end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Exited,
    Deadline,
    Lost,
    Parent,
    /// Members of the group that we may not signal outlived SIGKILL.
    Foreign,
}

impl Why {
    fn word(self) -> &'static str {
        match self {
            Why::Exited => "exited",
            Why::Deadline => "deadline",
            Why::Lost => "lost",
            Why::Parent => "parent",
            Why::Foreign => "foreign",
        }
    }
}

/// Arguments: `FD PARENT_PID GRACE_MS DEADLINE_NS LABEL -- CMD...`, the deadline on
/// `CLOCK_BOOTTIME`.
struct Args {
    fd: i32,
    parent: i32,
    grace: Duration,
    deadline_ns: u128,
    label: String,
    cmd: Vec<String>,
}

fn parse(args: &[String]) -> Option<Args> {
    let sep = args.iter().position(|a| a == "--")?;
    let [fd, parent, grace, deadline, label] = &args[..sep] else {
        return None;
    };
    let cmd = args[sep + 1..].to_vec();
    if cmd.is_empty() {
        return None;
    }
    Some(Args {
        fd: fd.parse().ok()?,
        parent: parent.parse().ok()?,
        grace: Duration::from_millis(grace.parse().ok()?),
        deadline_ns: deadline.parse().ok()?,
        label: label.clone(),
        cmd,
    })
}

/// The argument list (after [`MODE`]) for supervising `cmd`.
pub fn args(
    fd: i32,
    grace: Duration,
    deadline_ns: u128,
    label: &str,
    cmd: &[String],
) -> Vec<String> {
    let mut out = vec![
        fd.to_string(),
        std::process::id().to_string(),
        grace.as_millis().to_string(),
        deadline_ns.to_string(),
        label.to_string(),
        "--".to_string(),
    ];
    out.extend(cmd.iter().cloned());
    out
}

/// Runs the supervisor; `args` are the arguments after [`MODE`]. Never returns.
pub fn main(args: &[String]) -> ! {
    let Some(a) = parse(args) else {
        eprintln!("zkfence: {MODE} is internal to zkfence exec/elect");
        std::process::exit(crate::exit::USAGE as i32);
    };
    // SAFETY: the fd was handed to us by zkfence for exactly this; nobody else owns it.
    let mut sock = unsafe { UnixStream::from_raw_fd(a.fd) };
    set_cloexec(a.fd); // CMD must not hold zkfence's socket open
    let _ = sock.set_nonblocking(true);
    let wake = wake_pipe();
    for sig in [
        libc::SIGCHLD,
        PARENT_DEATH,
        // Sent to zkfence's whole process group by a terminal or `kill 0`: zkfence forwards
        // them to CMD's group itself, so they must neither kill us nor reach CMD twice. A
        // handler (not SIG_IGN) so CMD starts with the default dispositions.
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
    ] {
        install(sig);
    }
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            PARENT_DEATH as libc::c_ulong,
            0,
            0,
            0,
        );
        // Orphaned members of CMD's group are re-parented to us, so we reap them and can
        // tell when the group is gone.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
    // zkfence may have died before the death signal was armed: then nothing would come.
    if parent_gone(a.parent) {
        std::process::exit(crate::exit::ERROR as i32);
    }
    // An absolute instant: however late we got it, it is the lease's own deadline.
    let deadline = Instant::from_ns(a.deadline_ns);
    let started = Instant::now();
    if started >= deadline {
        send(
            &mut sock,
            &format!(
                "failed {} {} ran out before {:?} could start; nothing was run",
                crate::exit::LOST,
                a.label,
                a.cmd[0]
            ),
        );
        std::process::exit(0);
    }
    let mut command = std::process::Command::new(&a.cmd[0]);
    command.args(&a.cmd[1..]).process_group(0);
    // In the terminal's foreground, CMD's group takes it (it may read it), until it is gone.
    let terminal = crate::terminal::ours();
    if terminal {
        crate::terminal::give_to(&mut command);
    }
    let child = command.spawn();
    let pid = match child {
        Ok(child) => child.id() as i32,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::NotFound => crate::exit::NOT_FOUND,
                _ => crate::exit::CANNOT_EXECUTE,
            };
            let what = match e.kind() {
                ErrorKind::NotFound => "command not found".to_string(),
                ErrorKind::PermissionDenied => "permission denied".to_string(),
                _ => e.to_string(),
            };
            send(
                &mut sock,
                &format!("failed {code} cannot run {:?}: {what}", a.cmd[0]),
            );
            std::process::exit(0);
        }
    };
    send(&mut sock, &format!("started {pid}"));
    let mut s = State {
        pgid: pid,
        name: a.cmd[0].clone(),
        label: a.label,
        grace: a.grace,
        deadline,
        window: a.grace.min((deadline - started) / 2),
        stopping: None,
        termed: false,
        killed: false,
        kill_at: None,
        leader: None,
        terminal,
    };
    run(&mut s, &mut sock, wake, a.parent)
}

/// What is left of CMD's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// At least one member we may signal.
    Alive,
    /// Members remain, but we may signal none of them (they changed their user).
    Foreign,
    Gone,
}

/// The members of process group `pgid` (from /proc), with their real user ids.
fn members(pgid: i32) -> Vec<(i32, u32)> {
    let mut out = vec![];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        if rest.split_whitespace().nth(2).and_then(|g| g.parse().ok()) != Some(pgid) {
            continue;
        }
        let uid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(u32::MAX);
        out.push((pid, uid));
    }
    out
}

struct State {
    pgid: i32,
    name: String,
    label: String,
    grace: Duration,
    /// When the lease runs out unless zkfence extends it: CMD's group is SIGKILLed then.
    deadline: Instant,
    /// How long before the deadline SIGTERM comes: --grace, at most half the lease left at
    /// the last extension (so a healthy lease, extended every sixth of the session timeout,
    /// never gets there).
    window: Duration,
    /// Set once CMD is being stopped; extensions no longer count then.
    stopping: Option<Why>,
    termed: bool,
    killed: bool,
    /// SIGKILL after a forwarded signal or a loss, `grace` later.
    kill_at: Option<Instant>,
    /// CMD's own wait status, once reaped.
    leader: Option<i32>,
    /// CMD's group was given the terminal (`terminal.rs`): it is taken back when it ends.
    terminal: bool,
}

impl State {
    /// Gives the terminal back to zkfence's group, if CMD's group had it.
    fn release_terminal(&self) {
        if self.terminal {
            crate::terminal::take_back();
        }
    }

    fn signal_group(&self, sig: i32) {
        // SAFETY: kill(2) on a process group we created; while any member lives (we check
        // before stopping), the id cannot be reused.
        unsafe {
            libc::kill(-self.pgid, sig);
        }
    }

    fn group_alive(&self) -> bool {
        self.group() != Group::Gone
    }

    /// Whether the group still has members, and whether we may signal any of them.
    fn group(&self) -> Group {
        // SAFETY: signal 0 only checks for existence and permission.
        let r = unsafe { libc::kill(-self.pgid, 0) };
        if r == 0 {
            return Group::Alive;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Group::Gone,
            // EPERM: members remain, and none of them is ours to signal.
            _ => Group::Foreign,
        }
    }

    fn stop(&mut self, why: Why, now: Instant) {
        if self.stopping.is_none() {
            self.stopping = Some(why);
        }
        if !self.termed {
            self.termed = true;
            self.signal_group(libc::SIGTERM);
        }
        let at = (now + self.grace).min(self.deadline);
        self.kill_at = Some(self.kill_at.map_or(at, |k| k.min(at)));
    }

    fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            self.signal_group(libc::SIGKILL);
        }
    }

    /// Reaps every exited child (CMD, and orphans of its group re-parented to us).
    fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a valid out pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.pgid {
                self.leader = Some(status);
            }
        }
    }

    fn message(&mut self, line: &str, now: Instant) {
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|w| w.parse::<u64>().ok()),
        ) {
            (Some("until"), Some(ns)) if self.stopping.is_none() => {
                self.deadline = Instant::from_ns(ns as u128);
                self.window = self
                    .grace
                    .min(self.deadline.saturating_duration_since(now) / 2);
            }
            (Some("signal"), Some(sig)) => {
                self.signal_group(sig as i32);
                let at = (now + self.grace).min(self.deadline);
                self.kill_at.get_or_insert(at);
            }
            (Some("lost"), _) if self.stopping.is_none() => self.stop(Why::Lost, now),
            _ => {}
        }
    }
}

fn run(s: &mut State, sock: &mut UnixStream, wake: i32, parent: i32) -> ! {
    let timer = boot_timer();
    let mut buf = Vec::new();
    let mut sock_open = true;
    loop {
        s.reap();
        let now = Instant::now();
        let parent_died =
            !sock_open || (PARENT_SIGNALLED.load(Ordering::SeqCst) && parent_gone(parent));
        if parent_died && s.stopping != Some(Why::Parent) && !s.killed {
            if s.group_alive() {
                eprintln!(
                    "zkfence: zkfence (supervising {} under {}) died: SIGKILL to {}'s process group {} so it cannot outlive the lock",
                    s.name, s.label, s.name, s.pgid
                );
            }
            s.stopping = Some(Why::Parent);
            s.kill();
        }
        if s.stopping.is_none() && now + s.window >= s.deadline {
            let left = s.deadline.saturating_duration_since(now);
            if s.group_alive() {
                eprintln!(
                    "zkfence: {} runs out in {:.2}s and zkfence has not renewed it (zkfence frozen, or the ensemble silent): \
                     SIGTERM to {}'s process group {}, SIGKILL at the deadline",
                    s.label,
                    left.as_secs_f64(),
                    s.name,
                    s.pgid
                );
            }
            s.stop(Why::Deadline, now);
        }
        if !s.killed && (now >= s.deadline || s.kill_at.is_some_and(|k| now >= k)) {
            if s.group_alive() {
                eprintln!(
                    "zkfence: {}'s process group {} still runs {}: SIGKILL",
                    s.name,
                    s.pgid,
                    if now >= s.deadline {
                        format!("at the deadline of {}", s.label)
                    } else {
                        format!("{:?} after the signal", s.grace)
                    }
                );
            }
            s.kill();
        }
        // Only members we may not signal outlived SIGKILL: waiting for them would hold the
        // lock for as long as they please (or hang zkfence while the lock passes on with
        // the session). Say who they are and end.
        if s.killed && s.group() == Group::Foreign {
            // SAFETY: getuid has no preconditions.
            let ours = unsafe { libc::getuid() };
            let foreign: Vec<String> = members(s.pgid)
                .into_iter()
                .filter(|(_, uid)| *uid != ours)
                .map(|(pid, uid)| format!("pid {pid} (uid {uid})"))
                .collect();
            eprintln!(
                "zkfence: {}'s process group {} still has processes of another user that zkfence may not signal: {}; \
                 they escaped the group kill (a setuid program or sudo in CMD) and may still run: run zkfence itself as that user instead",
                s.name,
                s.pgid,
                if foreign.is_empty() { "(none visible in /proc)".to_string() } else { foreign.join(", ") }
            );
            let status = s.leader.unwrap_or(0);
            send(
                sock,
                &format!("done {} {}", how_ended(status), Why::Foreign.word()),
            );
            s.release_terminal();
            std::process::exit(0);
        }
        if let Some(status) = s.leader {
            if !s.group_alive() {
                let why = s.stopping.unwrap_or(Why::Exited);
                s.release_terminal();
                send(sock, &format!("done {} {}", how_ended(status), why.word()));
                std::process::exit(0);
            }
        }
        // Sleep until the next thing to do.
        let mut next = Vec::new();
        if s.stopping.is_none() {
            next.push(s.deadline.checked_sub(s.window).unwrap_or(now));
        }
        if !s.killed {
            next.push(s.deadline);
            next.extend(s.kill_at);
        }
        if s.leader.is_some() {
            next.push(now + STRAGGLER_POLL);
        }
        // On a CLOCK_BOOTTIME timer, not poll's own timeout (CLOCK_MONOTONIC): after a
        // suspend that outlasted the next deadline, it fires at the wake-up.
        arm(timer, next.iter().min().copied());
        let mut fds = [
            libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if sock_open { sock_fd(sock) } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: timer,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on a valid array of pollfd.
        unsafe {
            libc::poll(fds.as_mut_ptr(), 3, -1);
        }
        drain(wake);
        drain(timer);
        if sock_open && fds[1].revents != 0 {
            let mut chunk = [0u8; 512];
            loop {
                match sock.read(&mut chunk) {
                    Ok(0) => {
                        sock_open = false;
                        break;
                    }
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => {
                        sock_open = false;
                        break;
                    }
                }
            }
            let now = Instant::now();
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                s.message(String::from_utf8_lossy(&line).trim(), now);
            }
        }
    }
}

/// `code N` or `signal N` for a wait status.
fn how_ended(status: i32) -> String {
    match (
        std::process::ExitStatus::from_raw(status).code(),
        libc::WIFSIGNALED(status),
    ) {
        (Some(code), _) => format!("code {code}"),
        (None, true) => format!("signal {}", libc::WTERMSIG(status)),
        _ => "code 1".to_string(),
    }
}

fn sock_fd(sock: &UnixStream) -> i32 {
    use std::os::fd::AsRawFd;
    sock.as_raw_fd()
}

fn parent_gone(parent: i32) -> bool {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() != parent }
}

fn send(sock: &mut UnixStream, line: &str) {
    // Blocking for the few bytes of a report: the socket buffer is far larger.
    let _ = sock.set_nonblocking(false);
    let _ = sock.write_all(format!("{line}\n").as_bytes());
    let _ = sock.set_nonblocking(true);
}

fn set_cloexec(fd: i32) {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
    }
}

/// A timer on the deadlines' clock (`CLOCK_BOOTTIME`), disarmed; [`arm`] sets it.
fn boot_timer() -> i32 {
    // SAFETY: timerfd_create with valid flags.
    let fd = unsafe {
        libc::timerfd_create(crate::clock::CLOCK, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK)
    };
    if fd < 0 {
        eprintln!(
            "zkfence: cannot create a timer: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(crate::exit::ERROR as i32);
    }
    fd
}

/// Sets `timer` to fire at `at` (at once if it has passed), or disarms it.
fn arm(timer: i32, at: Option<Instant>) {
    let value = match at {
        // A zero it_value disarms: one nanosecond past the clock's zero is surely past.
        Some(at) => at.max(Instant::from_ns(1)).timespec(),
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
    };
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    // SAFETY: timerfd_settime on our timer with a valid spec; the old value is not asked for.
    unsafe {
        libc::timerfd_settime(timer, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
    }
}

/// A self-pipe the signal handler writes to, so `poll` wakes for signals without races.
fn wake_pipe() -> i32 {
    let mut fds = [0; 2];
    // SAFETY: pipe2 with a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        eprintln!("zkfence: supervisor cannot create a pipe");
        std::process::exit(crate::exit::ERROR as i32);
    }
    WAKE_FD.store(fds[1], Ordering::SeqCst);
    fds[0]
}

fn drain(fd: i32) {
    let mut buf = [0u8; 64];
    // SAFETY: read into a valid buffer from our non-blocking pipe.
    while unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) } > 0 {}
}

fn install(sig: i32) {
    // SAFETY: a zeroed sigaction with a valid handler; SA_RESTART keeps our own writes and
    // reads from failing with EINTR (poll still returns early, and the self-pipe wakes it).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
}
