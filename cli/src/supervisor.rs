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
//!   which zkfence extends (as a remaining duration) each time its lease clock moves. If
//!   zkfence is frozen (SIGSTOP, a stall, swap) or the lease is running out, no extension
//!   comes: CMD's group gets SIGTERM at `deadline - min(grace, half the lease left at the
//!   last extension)` and SIGKILL at the deadline, when the lease clock says the ensemble
//!   could start expiring the session.
//! - **Signals go to the group**, and CMD counts as finished only when its whole group is
//!   gone (the supervisor is a child subreaper, so orphaned members are reaped here).
//!
//! The protocol on the socket is one line per message. zkfence → supervisor:
//! `extend MS`, `signal N`, `lost`. Supervisor → zkfence: `started PID`, `failed CODE TEXT`,
//! `done code|signal N WHY` with WHY one of `exited`, `deadline`, `lost`, `parent`.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

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
}

impl Why {
    fn word(self) -> &'static str {
        match self {
            Why::Exited => "exited",
            Why::Deadline => "deadline",
            Why::Lost => "lost",
            Why::Parent => "parent",
        }
    }
}

/// Arguments: `FD PARENT_PID GRACE_MS REMAINING_MS LABEL -- CMD...`.
struct Args {
    fd: i32,
    parent: i32,
    grace: Duration,
    remaining: Duration,
    label: String,
    cmd: Vec<String>,
}

fn parse(args: &[String]) -> Option<Args> {
    let sep = args.iter().position(|a| a == "--")?;
    let [fd, parent, grace, remaining, label] = &args[..sep] else {
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
        remaining: Duration::from_millis(remaining.parse().ok()?),
        label: label.clone(),
        cmd,
    })
}

/// The argument list (after [`MODE`]) for supervising `cmd`.
pub fn args(
    fd: i32,
    grace: Duration,
    remaining: Duration,
    label: &str,
    cmd: &[String],
) -> Vec<String> {
    let mut out = vec![
        fd.to_string(),
        std::process::id().to_string(),
        grace.as_millis().to_string(),
        remaining.as_millis().to_string(),
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
    let started = Instant::now();
    let child = std::process::Command::new(&a.cmd[0])
        .args(&a.cmd[1..])
        .process_group(0)
        .spawn();
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
        deadline: started + a.remaining,
        window: a.grace.min(a.remaining / 2),
        stopping: None,
        termed: false,
        killed: false,
        kill_at: None,
        leader: None,
    };
    run(&mut s, &mut sock, wake, a.parent)
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
}

impl State {
    fn signal_group(&self, sig: i32) {
        // SAFETY: kill(2) on a process group we created; while any member lives (we check
        // before stopping), the id cannot be reused.
        unsafe {
            libc::kill(-self.pgid, sig);
        }
    }

    fn group_alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence.
        let r = unsafe { libc::kill(-self.pgid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
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
            (Some("extend"), Some(ms)) if self.stopping.is_none() => {
                let left = Duration::from_millis(ms);
                self.deadline = now + left;
                self.window = self.grace.min(left / 2);
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
        if let Some(status) = s.leader {
            if !s.group_alive() {
                let how = match (
                    std::process::ExitStatus::from_raw(status).code(),
                    libc::WIFSIGNALED(status),
                ) {
                    (Some(code), _) => format!("code {code}"),
                    (None, true) => format!("signal {}", libc::WTERMSIG(status)),
                    _ => "code 1".to_string(),
                };
                let why = s.stopping.unwrap_or(Why::Exited);
                send(sock, &format!("done {how} {}", why.word()));
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
        let timeout = next
            .iter()
            .map(|t| t.saturating_duration_since(now))
            .min()
            .map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32 + 1);
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
        ];
        // SAFETY: poll on a valid array of pollfd.
        unsafe {
            libc::poll(fds.as_mut_ptr(), 2, timeout);
        }
        drain(wake);
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
