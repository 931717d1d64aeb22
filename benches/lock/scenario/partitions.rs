//! 11 partitions: 1,000 items divided over 10 members, zkfence's partitions against Python
//! Kazoo's `SetPartitioner` on the same ensemble in the same run, one arm after the other,
//! in alternating order each round. Per arm: 9 members start and settle; a 10th joins (the
//! rebalance: its time, and the items moved and re-granted); the 10 sit still for a window
//! in which the ensemble counts what they cost (requests at the server, `cons`; transactions,
//! the zxid's movement in `srvr`); one leaves (the rebalance again).
//!
//! "Settled" is read the same way for both arms, by an observer session on another
//! connection: every item is held by the member the arm's assignment gives it to under the
//! live members, and nobody waits for it ([`zkfence::Partitions::status`]; for Kazoo's
//! members with [`zkfence::Assignment::Kazoo`], which reads Kazoo's party). Rebalance time
//! runs from the join or leave call to the first poll (every 100 ms) that finds the set
//! settled. An item *moved* when its owner changed, was *re-granted* when its token changed
//! (a new grant, to the same member or not). Both settle times (zkfence's `settle`, Kazoo's
//! `time_boundary`) are the same, [`SETTLE`].

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use zkfence::{FencingToken, OwnershipChange, Partitions, Session, SessionOptions};

use super::sessions::zxid;
use crate::arms::KazooPartitioner;
use crate::report::{Goal, Report, Row};
use crate::server::{ids_of_sessions, touch, Bench};
use crate::stats::round3;
use crate::{progress, Result, SESSION_TIMEOUT};

pub const ITEMS: usize = 1000;
pub const MEMBERS: usize = 10;
/// zkfence's settle and Kazoo's `time_boundary`.
pub const SETTLE: Duration = Duration::from_secs(1);
/// A join moves at least ⌊n/m⌋ items; the sticky assignment should move at most this much
/// more (1.2 × on average over random member sets; the bench's ids are fixed).
const MOVED_BOUND: f64 = 1.4;
/// How long a set may take to settle before the bench gives up.
const SETTLE_LIMIT: Duration = Duration::from_secs(180);

/// One rebalance, as the observer saw it.
#[derive(Debug, Clone, Copy, Default)]
struct Rebalance {
    seconds: f64,
    moved: usize,
    regranted: usize,
    /// The fewest items a balanced assignment could move.
    minimum: usize,
}

impl Rebalance {
    fn json(&self) -> serde_json::Value {
        json!({"seconds": round3(self.seconds), "moved": self.moved,
               "regranted": self.regranted, "minimum": self.minimum})
    }
}

#[derive(Debug, Clone, Default)]
struct Trial {
    /// 9 members from nothing to settled.
    start_s: f64,
    join: Rebalance,
    leave: Rebalance,
    requests_per_s: f64,
    transactions_per_s: Option<f64>,
    window_s: f64,
}

impl Trial {
    fn json(&self) -> serde_json::Value {
        json!({
            "start_s": round3(self.start_s),
            "join": self.join.json(),
            "leave": self.leave.json(),
            "stable_requests_per_s": round3(self.requests_per_s),
            "stable_transactions_per_s": self.transactions_per_s.map(round3),
            "window_s": round3(self.window_s),
        })
    }
}

/// Owners (ids) and tokens of every item once the set is settled over `members` ids.
struct Settled {
    owners: Vec<String>,
    tokens: Vec<Option<FencingToken>>,
    at: Instant,
}

async fn settled(view: &Partitions, members: usize) -> Result<Settled> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let status = view.status().await?;
        let mut ids: Vec<&str> = status.members.iter().map(|m| m.id.as_str()).collect();
        ids.dedup();
        let done = ids.len() == members
            && status
                .items
                .iter()
                .all(|i| i.holder.is_some() && i.moving_to().is_none() && i.waiting == 0);
        if done {
            return Ok(Settled {
                at: Instant::now(),
                owners: status
                    .items
                    .iter()
                    .map(|i| i.owner.clone().unwrap_or_default())
                    .collect(),
                tokens: status
                    .items
                    .iter()
                    .map(|i| i.holder.as_ref().map(|h| h.token))
                    .collect(),
            });
        }
        if Instant::now() > deadline {
            return Err(format!("{} did not settle over {members} members", view.path()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the set has no member left and no item is held: the next arm starts clean.
async fn emptied(view: &Partitions) -> Result<()> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let status = view.status().await?;
        if status.members.is_empty() && status.items.iter().all(|i| i.holder.is_none()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{} still has members or holders", view.path()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn rebalance(before: &Settled, after: &Settled, from: Instant, minimum: usize) -> Rebalance {
    Rebalance {
        seconds: (after.at - from).as_secs_f64(),
        moved: before
            .owners
            .iter()
            .zip(&after.owners)
            .filter(|(a, b)| a != b)
            .count(),
        regranted: before
            .tokens
            .iter()
            .zip(&after.tokens)
            .filter(|(a, b)| a != b)
            .count(),
        minimum,
    }
}

fn id(i: usize) -> String {
    format!("member-{i}")
}

/// A zkfence member whose workers release at once when asked.
struct OurMember {
    session: Session,
    leave: mpsc::UnboundedSender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn our_member(bench: &Bench, path: &str, i: usize) -> Result<OurMember> {
    // Persistent directories: the item directories of an earlier arm, containers, would be
    // removed by the leader during a later arm's window, and counted there as transactions.
    let session = Session::connect(
        &bench.connect,
        SessionOptions::new()
            .session_timeout(SESSION_TIMEOUT)
            .persistent_directories(true),
    )
    .await?;
    let mut member = session
        .partitions(path, ITEMS)
        .settle(SETTLE)
        .join(&id(i))
        .await?;
    let (leave, mut leaving) = mpsc::unbounded_channel::<()>();
    let task = tokio::spawn(async move {
        let mut held = std::collections::HashMap::new();
        loop {
            let change = tokio::select! {
                change = member.next() => change,
                Some(()) = leaving.recv() => { member.leave(); continue; }
            };
            match change {
                Some(Ok(OwnershipChange::Acquired { item, lease })) => {
                    held.insert(item.index(), lease);
                }
                Some(Ok(OwnershipChange::ReleaseRequested { item, .. })) => {
                    if let Some(lease) = held.remove(&item.index()) {
                        tokio::spawn(lease.release());
                    }
                }
                Some(Ok(OwnershipChange::Lost { item, .. })) => {
                    held.remove(&item.index());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    progress(format!("11 partitions: a member stopped: {e}"));
                    return;
                }
                None => return,
            }
        }
    });
    Ok(OurMember {
        session,
        leave,
        task,
    })
}

async fn ours(bench: &Bench, round: usize) -> Result<Trial> {
    let path = bench.path(&format!("partitions/ours-{round}"));
    let observer = bench.session().await?;
    let view = observer.partitions(&path, ITEMS);
    let mut trial = Trial::default();

    let started = Instant::now();
    let mut members = Vec::new();
    for i in 0..MEMBERS - 1 {
        members.push(our_member(bench, &path, i).await?);
    }
    let nine = settled(&view, MEMBERS - 1).await?;
    trial.start_s = (nine.at - started).as_secs_f64();

    let joining = Instant::now();
    members.push(our_member(bench, &path, MEMBERS - 1).await?);
    let ten = settled(&view, MEMBERS).await?;
    trial.join = rebalance(&nine, &ten, joining, ITEMS / MEMBERS);

    let sessions: Vec<Session> = members.iter().map(|m| m.session.clone()).collect();
    let (requests, transactions, window) = stable_window(bench, &sessions, None).await?;
    // Every handle on a session must be gone for `close` to end it at once.
    drop(sessions);
    trial.requests_per_s = requests;
    trial.transactions_per_s = transactions;
    trial.window_s = window;

    let leaver = id(0);
    let minimum = ten.owners.iter().filter(|o| **o == leaver).count();
    let leaving = Instant::now();
    let _ = members[0].leave.send(());
    let nine_again = settled(&view, MEMBERS - 1).await?;
    trial.leave = rebalance(&ten, &nine_again, leaving, minimum);

    let closing = Instant::now();
    futures::future::join_all(members.into_iter().map(|member| async move {
        member.task.abort();
        let _ = member.task.await;
        member.session.close().await;
    }))
    .await;
    progress(format!(
        "11 partitions: our members closed in {:.1} s",
        closing.elapsed().as_secs_f64()
    ));
    emptied(&view).await?;
    observer.close().await;
    Ok(trial)
}

async fn kazoo(bench: &Bench, driver: &mut KazooPartitioner, round: usize) -> Result<Trial> {
    let path = bench.path(&format!("partitions/kazoo-{round}"));
    let observer = bench.session().await?;
    let view = observer.partitions(&path, ITEMS).kazoo_compatible();
    let mut trial = Trial::default();

    let started = Instant::now();
    let mut sessions = Vec::new();
    for i in 0..MEMBERS - 1 {
        sessions.push(driver.join(&path, ITEMS, &id(i), SETTLE).await?);
    }
    let nine = settled(&view, MEMBERS - 1).await?;
    trial.start_s = (nine.at - started).as_secs_f64();

    let joining = Instant::now();
    sessions.push(driver.join(&path, ITEMS, &id(MEMBERS - 1), SETTLE).await?);
    let ten = settled(&view, MEMBERS).await?;
    trial.join = rebalance(&nine, &ten, joining, ITEMS / MEMBERS);

    let (requests, transactions, window) =
        stable_window(bench, &[], Some((driver, &sessions))).await?;
    trial.requests_per_s = requests;
    trial.transactions_per_s = transactions;
    trial.window_s = window;

    let leaver = id(0);
    let minimum = ten.owners.iter().filter(|o| **o == leaver).count();
    let leaving = Instant::now();
    driver.leave(&leaver).await?;
    let nine_again = settled(&view, MEMBERS - 1).await?;
    trial.leave = rebalance(&ten, &nine_again, leaving, minimum);

    driver.stop().await?;
    emptied(&view).await?;
    observer.close().await;
    Ok(trial)
}

/// What the members cost the ensemble per second while nothing changes: requests from their
/// sessions at the server, and transactions (the zxid's movement: the whole ensemble's, and
/// nothing else runs meanwhile).
async fn stable_window(
    bench: &Bench,
    ours: &[Session],
    kazoo: Option<(&mut KazooPartitioner, &[i64])>,
) -> Result<(f64, Option<f64>, f64)> {
    let window = if bench.plan.quick {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(30)
    };
    let ids = match &kazoo {
        Some((_, ids)) => ids.to_vec(),
        None => ids_of_sessions(ours),
    };
    match kazoo {
        Some((driver, _)) => driver.touch().await?,
        None => touch(ours.iter().map(|s| s.client())).await?,
    }
    let before = bench.counted(&ids).await?;
    let zxid_before = zxid(bench).await?;
    let start = Instant::now();
    // A measured window, not a synchronisation: what still members cost per second.
    tokio::time::sleep(window).await;
    let zxid_after = zxid(bench).await?;
    let counted = bench.counted(&ids).await?.since(before);
    let secs = start.elapsed().as_secs_f64();
    let transactions =
        (zxid_after >> 32 == zxid_before >> 32).then(|| (zxid_after - zxid_before) as f64 / secs);
    Ok((counted.received as f64 / secs, transactions, secs))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

pub async fn run(bench: &Bench, report: &mut Report) -> Result<()> {
    let rounds = if bench.plan.quick { 1 } else { 3 };
    progress(format!(
        "11 partitions: {ITEMS} items over {MEMBERS} members, zkfence against Kazoo's \
         SetPartitioner, {rounds} round(s)"
    ));
    let mut driver = KazooPartitioner::start(bench).await?;
    let (mut our_trials, mut kazoo_trials) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let kazoo_first = round % 2 == 1;
        if kazoo_first {
            if let Some(driver) = driver.as_mut() {
                kazoo_trials.push(kazoo(bench, driver, round).await?);
            }
        }
        our_trials.push(ours(bench, round).await?);
        if !kazoo_first {
            if let Some(driver) = driver.as_mut() {
                kazoo_trials.push(kazoo(bench, driver, round).await?);
            }
        }
        progress(format!(
            "11 partitions: round {} of {rounds} done",
            round + 1
        ));
    }
    if let Some(driver) = driver {
        driver.quit().await;
    }

    report.set(
        "partitions",
        json!({
            "items": ITEMS,
            "members": MEMBERS,
            "settle_s": SETTLE.as_secs_f64(),
            "ours": our_trials.iter().map(Trial::json).collect::<Vec<_>>(),
            "kazoo": kazoo_trials.iter().map(Trial::json).collect::<Vec<_>>(),
        }),
    );

    let scenario = format!("11 partitions ({ITEMS} items, {MEMBERS} members)");
    let summary = |trials: &[Trial], pick: fn(&Trial) -> Rebalance| -> Option<String> {
        (!trials.is_empty()).then(|| {
            let r: Vec<Rebalance> = trials.iter().map(pick).collect();
            format!(
                "{:.2} s / {} / {}",
                median(r.iter().map(|r| r.seconds).collect()),
                r.iter().map(|r| r.moved).max().unwrap_or(0),
                r.iter().map(|r| r.regranted).max().unwrap_or(0),
            )
        })
    };
    for (change, pick) in [
        ("join", (|t: &Trial| t.join) as fn(&Trial) -> Rebalance),
        ("leave", |t: &Trial| t.leave),
    ] {
        let worst_moved = our_trials
            .iter()
            .map(pick)
            .map(|r| r.moved as f64 / r.minimum.max(1) as f64)
            .fold(0.0, f64::max);
        let churn = our_trials.iter().map(pick).all(|r| r.regranted == r.moved);
        let minimum = our_trials.first().map(|t| pick(t).minimum).unwrap_or(0);
        let time_ratio = (!kazoo_trials.is_empty()).then(|| {
            median(our_trials.iter().map(|t| pick(t).seconds).collect())
                / median(kazoo_trials.iter().map(|t| pick(t).seconds).collect())
        });
        report.row(
            Row::new(
                &scenario,
                format!(
                    "rebalance after a {change}: settled in (median) / items moved / items re-granted \
                     (at least {minimum} must move)"
                ),
            )
            .ours(summary(&our_trials, pick).unwrap_or_default())
            .kazoo(summary(&kazoo_trials, pick).unwrap_or_else(|| "-".into()))
            .ratio(time_ratio.map_or("-".into(), |r| format!("time {r:.2} × Kazoo's")))
            .goal(
                Goal::new(
                    &format!("partitions.{change}_moved_over_minimum"),
                    worst_moved,
                    format!("<= {MOVED_BOUND}, re-granted = moved"),
                    worst_moved <= MOVED_BOUND && churn,
                )
                .checked()
                .detail(format!(
                    "a {change} moved up to {worst_moved:.2} × the {minimum} items that must move; \
                     every item re-granted also moved: {churn}"
                )),
            ),
        );
    }
    let cost = |trials: &[Trial]| -> Option<String> {
        (!trials.is_empty()).then(|| {
            let requests = median(trials.iter().map(|t| t.requests_per_s).collect());
            let transactions: Vec<f64> =
                trials.iter().filter_map(|t| t.transactions_per_s).collect();
            format!(
                "{requests:.2} / {}",
                if transactions.is_empty() {
                    "?".into()
                } else {
                    format!("{:.2}", median(transactions))
                }
            )
        })
    };
    report.row(
        Row::new(
            &scenario,
            format!("while stable, at the server per second: requests / transactions ({MEMBERS} sessions)"),
        )
        .ours(cost(&our_trials).unwrap_or_default())
        .kazoo(cost(&kazoo_trials).unwrap_or_else(|| "-".into()))
        .ratio(format!(
            "9 members from nothing to settled: {:.1} s ours, {} Kazoo",
            median(our_trials.iter().map(|t| t.start_s).collect()),
            if kazoo_trials.is_empty() {
                "-".into()
            } else {
                format!("{:.1} s", median(kazoo_trials.iter().map(|t| t.start_s).collect()))
            }
        )),
    );
    Ok(())
}
