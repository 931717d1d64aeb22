//! 6. Heartbeat cost of idle sessions: requests per second of a session holding 1 lease, of
//!    one holding 100, and of one holding none, counted at the server over the same window,
//!    with the lease clock's keepalive transactions per second (a holding session's keepalive
//!    is a transaction that changes nothing; an idle one's is a `sync`). The window starts
//!    once every lease watches its own node (one `exists` each, once: issue 43).

use std::time::Instant;

use serde_json::json;
use zkfence::{Lease, Session};

use crate::report::{Goal, Report, Row};
use crate::server::{touch, Bench, Counted};
use crate::stats::round3;
use crate::{progress, Result, SESSION_TIMEOUT};

/// Leases the busier idle session holds.
const MANY: usize = 100;
/// How far apart the two sessions' counts over the window may be: they send at the same
/// period but not in phase, so each kind of heartbeat (the client's ping, the lease clock's
/// sync) may land once more on one side of the window's edges than on the other. A keepalive
/// per lease would be ~100 times the rate.
const FLAT_SLACK_REQUESTS: f64 = 2.0;

/// Two idle sessions, one holding 1 lease and one holding 100, counted over the same window
/// (they sit idle while scenarios 1 and 2 run).
pub struct Idle {
    one: Session,
    many: Session,
    none: Session,
    _leases: Vec<Lease>,
    start: Instant,
    before: Vec<Counted>,
    keepalives_before: (u64, u64),
    transactions_before: (u64, u64, u64),
}

impl Idle {
    pub async fn start(bench: &Bench) -> Result<Idle> {
        let (one, many, none) = (
            bench.session().await?,
            bench.session().await?,
            bench.session().await?,
        );
        let mut leases = vec![one.lock(&bench.path("keepalive/one")).acquire().await?];
        let locks: Vec<_> = (0..MANY)
            .map(|i| many.lock(&bench.path(&format!("keepalive/many/{i}"))))
            .collect();
        leases.extend(futures::future::try_join_all(locks.iter().map(|l| l.acquire())).await?);
        // Each lease held longer than a keepalive interval watches its node once (one
        // `exists`, so a deletion by someone else reaches it): a one-time cost per lease,
        // counted apart. The window counts the heartbeats after it.
        let watched = |s: &Session, n: u64| s.metrics().lease_watches >= n;
        let deadline = Instant::now() + SESSION_TIMEOUT;
        while !(watched(&one, 1) && watched(&many, MANY as u64)) {
            if Instant::now() > deadline {
                return Err(format!(
                    "the held leases did not watch their nodes within {SESSION_TIMEOUT:?}: {} and {} of 1 and {MANY}",
                    one.metrics().lease_watches,
                    many.metrics().lease_watches
                )
                .into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        touch([one.client(), many.client(), none.client()]).await?;
        let before = bench
            .counted_each(&[one.id(), many.id(), none.id()])
            .await?;
        Ok(Idle {
            keepalives_before: (one.metrics().keepalives, many.metrics().keepalives),
            transactions_before: (
                one.metrics().keepalive_transactions,
                many.metrics().keepalive_transactions,
                none.metrics().keepalive_transactions,
            ),
            one,
            many,
            none,
            _leases: leases,
            start: Instant::now(),
            before,
        })
    }

    pub async fn finish(self, bench: &Bench, report: &mut Report) -> Result<()> {
        let window = bench.plan.keepalive_window;
        if self.start.elapsed() < window {
            progress("6/8 keepalive: waiting for the idle window to end");
            tokio::time::sleep(window - self.start.elapsed()).await;
        } else {
            progress("6/8 keepalive: counted while 1 and 2 ran");
        }
        let after = bench
            .counted_each(&[self.one.id(), self.many.id(), self.none.id()])
            .await?;
        let seconds = self.start.elapsed().as_secs_f64();
        let requests = (
            after[0].since(self.before[0]).received,
            after[1].since(self.before[1]).received,
        );
        let (one, many) = (requests.0 as f64 / seconds, requests.1 as f64 / seconds);
        let none = after[2].since(self.before[2]).received as f64 / seconds;
        let transactions = (
            (self.one.metrics().keepalive_transactions - self.transactions_before.0) as f64
                / seconds,
            (self.many.metrics().keepalive_transactions - self.transactions_before.1) as f64
                / seconds,
            (self.none.metrics().keepalive_transactions - self.transactions_before.2) as f64
                / seconds,
        );
        let ka = (
            (self.one.metrics().keepalives - self.keepalives_before.0) as f64 / seconds,
            (self.many.metrics().keepalives - self.keepalives_before.1) as f64 / seconds,
        );
        let apart = (many - one).abs() * seconds;
        report.set(
            "keepalive",
            json!({
                "window_s": round3(seconds),
                "session_timeout_s": SESSION_TIMEOUT.as_secs(),
                "requests_per_s_1": round3(one),
                "requests_per_s_100": round3(many),
                "keepalives_per_s_1": round3(ka.0),
                "keepalives_per_s_100": round3(ka.1),
                "requests_per_s_0": round3(none),
                "transactions_per_s_1": round3(transactions.0),
                "transactions_per_s_100": round3(transactions.1),
                "transactions_per_s_0": round3(transactions.2),
                "ensemble_per_s_1000_holding": {
                    "requests": round3(one * 1000.0),
                    "transactions": round3(transactions.0 * 1000.0),
                },
                "ensemble_per_s_1000_idle": {
                    "requests": round3(none * 1000.0),
                    "transactions": round3(transactions.2 * 1000.0),
                },
            }),
        );
        report.row(
            Row::new(
                &format!(
                    "6 keepalive (idle, {} s session)",
                    SESSION_TIMEOUT.as_secs()
                ),
                "requests/s per session holding 1 / 100 leases (at the server)",
            )
            .ours(format!("{one:.3} / {many:.3}"))
            .ratio(format!(
                "of which keepalives {:.3} / {:.3}, transactions {:.3} / {:.3} (client); \
                 no lease: {none:.3} requests/s, {:.3} transactions/s; 1,000 holding sessions: \
                 {:.0} requests/s, {:.0} transactions/s at the ensemble; over {seconds:.0} s",
                ka.0,
                ka.1,
                transactions.0,
                transactions.1,
                transactions.2,
                one * 1000.0,
                transactions.0 * 1000.0,
            ))
            .goal(
                Goal::new(
                    "keepalive.requests_per_s_100",
                    many,
                    "= requests_per_s_1",
                    apart <= FLAT_SLACK_REQUESTS,
                )
                .shown_as("flat")
                .checked()
                .detail(format!(
                    "{} requests holding {MANY} leases vs {} holding 1 over the same {seconds:.0} s; \
                     flat within {FLAT_SLACK_REQUESTS} requests",
                    requests.1, requests.0
                )),
            ),
        );
        Ok(())
    }
}
