//! CMD and the terminal: CMD runs in a process group of its own (so the supervisor can stop
//! all of it), which is not the terminal's foreground group, and a background group that
//! reads the terminal is stopped by SIGTTIN. So when zkfence runs in the terminal's
//! foreground, CMD's group is made the foreground for as long as it runs, as a shell does
//! for a job (`psql`, `sh -c 'read x'` under a lock read their input), and the supervisor
//! takes it back for zkfence's group when CMD's group is gone.
//!
//! Ctrl-C and Ctrl-Z then go to CMD's group, as they would without zkfence; zkfence still
//! stops CMD's group itself on loss, on its deadline, and on signals sent to zkfence.

use std::os::unix::process::CommandExt;

/// True if stdin is a terminal whose foreground process group is ours: CMD may have it.
pub fn ours() -> bool {
    // SAFETY: plain calls on fd 0 and our own process.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Makes CMD's new process group the terminal's foreground, in the child before it execs
/// (after its own `setpgid`), so CMD can never read the terminal while in the background.
pub fn give_to(cmd: &mut std::process::Command) {
    // SAFETY: the closure makes only async-signal-safe calls (signal, tcsetpgrp, getpid).
    unsafe {
        cmd.pre_exec(|| {
            // A background group's tcsetpgrp gets SIGTTOU; ours is about to be the foreground.
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, libc::getpid());
            // Ignored dispositions survive exec: CMD starts with the default.
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Gives the terminal back to our process group once CMD's group is gone.
pub fn take_back() {
    // SAFETY: as above, on fd 0 and our own process group.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, libc::getpgrp());
        libc::signal(libc::SIGTTOU, previous);
    }
}

/// Lets this process write to the terminal while CMD's group has it, even where the
/// terminal stops background writers (`stty tostop`): a stopped zkfence would not renew
/// the lease. Inherited by the supervisor; CMD gets the default back in [`give_to`].
pub fn write_from_background() {
    // SAFETY: setting a signal's disposition to SIG_IGN.
    unsafe {
        libc::signal(libc::SIGTTOU, libc::SIG_IGN);
    }
}
