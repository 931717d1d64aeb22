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
    // A semaphore (`exec --limit`) queues in {path}/locks for the turn and holds in
    // {path}/leases: its holders are the permits.
    let turn = session.lock(&format!("{path}/locks"));
    let permits = session.semaphore(path, usize::MAX);
    let me = session.id();
    let poller = tokio::spawn(async move {
        loop {
            let look = async {
                let contenders = lock.contenders().await?;
                if !contenders.is_empty() {
                    return zkfence::Result::<String>::Ok(describe(&contenders, me));
                }
                let holders = permits.holders().await?;
                let waiting = turn.contenders().await?;
                Ok(describe_permits(&holders, &waiting, me))
            };
            if let Ok(Ok(text)) = tokio::time::timeout(POLL, look).await {
                let _ = tx.send(text);
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
            "next in line; held by {} (queued {age:.0}s ago, token {})",
            holder.owner, holder.token
        ),
        n => format!(
            "{n} ahead of us; held by {} (queued {age:.0}s ago, token {})",
            holder.owner, holder.token
        ),
    }
}

/// Our place at a semaphore: holding a permit, waiting for one (with the turn), or behind
/// others for the turn.
fn describe_permits(holders: &[Contender], waiting: &[Contender], me: i64) -> String {
    if holders.is_empty() && waiting.is_empty() {
        return String::from("joining the queue");
    }
    let limit = holders.iter().find_map(|h| h.owner.permits);
    // The lease nodes past the limit wait (ours among them, while we have the turn).
    let holders = &holders[..limit.unwrap_or(holders.len()).min(holders.len())];
    let held = match limit {
        Some(n) => format!("{} of {n} permits held", holders.len().min(n)),
        None => format!("{} permits held", holders.len()),
    };
    let names: Vec<String> = holders.iter().map(|h| h.owner.to_string()).collect();
    match waiting.iter().position(|c| c.session_id == me) {
        Some(0) => format!("next for a permit; {held} ({})", names.join(", ")),
        Some(n) => format!("{n} ahead of us; {held} ({})", names.join(", ")),
        None => String::from("joining the queue"),
    }
}
