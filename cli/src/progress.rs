//! The waiting line: our place in the queue, on a terminal, while an acquire or campaign runs.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::sync::watch;
use zkfence::{Contender, Session};

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// How often the queue is listed: one cheap read per second.
const POLL: Duration = Duration::from_secs(1);
const FRAME: Duration = Duration::from_millis(100);

/// Runs `wait` and, if stderr is a terminal, shows a spinner with our position in the queue
/// at `path` (found by our session id) until it completes. The line is erased afterwards.
pub async fn show_while<T>(
    session: &Session,
    path: &str,
    verb: &str,
    wait: impl Future<Output = T>,
) -> T {
    if !std::io::stderr().is_terminal() {
        return wait.await;
    }
    let (tx, rx) = watch::channel(String::from("joining the queue"));
    // A separate handle, polled from its own task, so a slow or unreachable ensemble can
    // never hold up the acquire itself.
    let lock = session.lock(path);
    let me = session.id();
    let poller = tokio::spawn(async move {
        loop {
            if let Ok(Ok(contenders)) = tokio::time::timeout(POLL, lock.contenders()).await {
                let _ = tx.send(describe(&contenders, me));
            }
            tokio::time::sleep(POLL).await;
        }
    });
    tokio::pin!(wait);
    let mut frame = 0usize;
    let out = loop {
        tokio::select! {
            out = &mut wait => break out,
            _ = tokio::time::sleep(FRAME) => {
                let text = rx.borrow().clone();
                eprint!("\r\x1b[2K{} {verb} {path}: {text}", FRAMES[frame % FRAMES.len()]);
                let _ = std::io::stderr().flush();
                frame += 1;
            }
        }
    };
    poller.abort();
    eprint!("\r\x1b[2K");
    let _ = std::io::stderr().flush();
    out
}

fn describe(contenders: &[Contender], me: i64) -> String {
    let Some(index) = contenders.iter().position(|c| c.session_id == me) else {
        return String::from("joining the queue");
    };
    let holder = &contenders[0];
    let age = crate::status::age_ms(holder.created_ms) as f64 / 1000.0;
    match index {
        0 => String::from("granted"),
        1 => format!(
            "next in line; held by {} for {age:.0}s (token {})",
            holder.owner, holder.token
        ),
        n => format!(
            "{n} ahead of us; held by {} for {age:.0}s (token {})",
            holder.owner, holder.token
        ),
    }
}
