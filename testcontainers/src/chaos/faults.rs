//! The fault kinds a campaign injects, and the schedule a seed makes of them.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One kind of fault. Each is started at a planned time and healed after a planned duration
/// (the instantaneous ones heal at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the ZooKeeper leader; healed by starting it again.
    KillLeader,
    /// SIGKILL a follower; healed by starting it again.
    KillFollower,
    /// SIGSTOP a server (any role); healed by SIGCONT.
    PauseServer,
    /// Cut a server (the leader half of the time) off from its peers while its clients stay
    /// connected; healed by restoring its links.
    IsolateServer,
    /// Blackhole one contender's connection (the holder's half of the time): bytes held,
    /// sockets open.
    BlackholeClient,
    /// Close one contender's connections (it reconnects at once). Instantaneous.
    CutClient,
    /// SIGSTOP the process holding the lock for longer than its session timeout; healed by
    /// SIGCONT. Its late writes must be refused by the fence once a newer holder wrote.
    StallHolder,
    /// SIGKILL a contender process (the holder's half of the time); healed by starting a new
    /// one in its place.
    KillClient,
    /// Expire a contender's session (the holder's half of the time), the way ZooKeeper's own
    /// tests do: connect with its session id and password elsewhere, then close that
    /// connection. Instantaneous.
    ExpireSession,
    /// Delete a waiter's queue node, as an operator cleaning up by hand would.
    /// Instantaneous.
    DeleteWaiter,
    /// Delete the current holder's queue node (of any recipe: a lock, a leadership, a
    /// permit, one path of a multi-lock), as an operator clearing a "stuck" lock would. No
    /// lock can tell the holder first (the next waiter is told by the same commit), so the
    /// checker allows that overlap and requires the holder's `Lost` within a bound instead.
    /// Instantaneous.
    DeleteHolder,
    /// Restart the servers one at a time (a rolling config change) with a
    /// `maxSessionTimeout` below the contenders' session timeout, so that sessions
    /// reconnecting get a shorter timeout than they asked for; healed by a second rolling
    /// restart with the first setting.
    ShrinkTimeout,
}

impl FaultKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FaultKind; 12] = [
        FaultKind::KillLeader,
        FaultKind::KillFollower,
        FaultKind::PauseServer,
        FaultKind::IsolateServer,
        FaultKind::BlackholeClient,
        FaultKind::CutClient,
        FaultKind::StallHolder,
        FaultKind::KillClient,
        FaultKind::ExpireSession,
        FaultKind::DeleteWaiter,
        FaultKind::DeleteHolder,
        FaultKind::ShrinkTimeout,
    ];

    /// The name used on the command line and in the history (`kill-leader`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "kill-leader",
            FaultKind::KillFollower => "kill-follower",
            FaultKind::PauseServer => "pause-server",
            FaultKind::IsolateServer => "isolate-server",
            FaultKind::BlackholeClient => "blackhole-client",
            FaultKind::CutClient => "cut-client",
            FaultKind::StallHolder => "stall-holder",
            FaultKind::KillClient => "kill-client",
            FaultKind::ExpireSession => "expire-session",
            FaultKind::DeleteWaiter => "delete-waiter",
            FaultKind::DeleteHolder => "delete-holder",
            FaultKind::ShrinkTimeout => "shrink-timeout",
        }
    }

    /// Whether it hurts a server (at most a minority of servers is hurt at once, so the
    /// ensemble keeps a quorum).
    pub fn hurts_a_server(self) -> bool {
        matches!(
            self,
            FaultKind::KillLeader
                | FaultKind::KillFollower
                | FaultKind::PauseServer
                | FaultKind::IsolateServer
                | FaultKind::ShrinkTimeout
        )
    }

    /// Whether it is over as soon as it is done (no heal step).
    pub fn is_instant(self) -> bool {
        matches!(
            self,
            FaultKind::CutClient
                | FaultKind::ExpireSession
                | FaultKind::DeleteWaiter
                | FaultKind::DeleteHolder
        )
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown fault kind {s:?}; expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// A small deterministic PRNG (SplitMix64): the same seed gives the same schedule on every
/// machine, which is all a campaign needs of it (not cryptographic, not for statistics).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant at these sizes).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (
            lo.as_millis() as u64,
            hi.as_millis().max(lo.as_millis()) as u64,
        );
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    /// True with probability `percent` / 100.
    pub(crate) fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Planned {
    /// When to start it, from the campaign's start.
    pub(crate) at: Duration,
    pub(crate) kind: FaultKind,
    /// How long it lasts before it is healed (zero for the instantaneous kinds).
    pub(crate) lasts: Duration,
    /// A random number that picks the victim among those that fit when it starts.
    pub(crate) pick: u64,
}

/// The faults a seed gives for a campaign of `duration`, each healed by its end. Kinds come in rounds, each round
/// every kind of `kinds` once in a random order, so a short campaign still sees each kind;
/// starts are `T/4..T` apart, so faults often overlap; a fault lasts `T/2..5T/2` (`T` the
/// session timeout): shorter ones are survived, longer ones expire sessions.
pub(crate) fn schedule(
    seed: u64,
    kinds: &[FaultKind],
    duration: Duration,
    session_timeout: Duration,
) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let t = session_timeout;
    let mut plan = Vec::new();
    if kinds.is_empty() {
        return plan;
    }
    // The ensemble and the contenders settle first.
    let mut at = t;
    let mut round: Vec<FaultKind> = Vec::new();
    loop {
        if round.is_empty() {
            round = kinds.to_vec();
            // Fisher–Yates.
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let kind = round.pop().expect("refilled above");
        let lasts = if kind.is_instant() {
            Duration::ZERO
        } else if kind == FaultKind::StallHolder {
            // Past the session timeout, the point of this fault.
            rng.between(t * 3 / 2, t * 5 / 2)
        } else {
            rng.between(t / 2, t * 5 / 2)
        };
        if at + lasts > duration {
            break;
        }
        plan.push(Planned {
            at,
            kind,
            lasts,
            pick: rng.next_u64(),
        });
        at += rng.between(t / 4, t);
    }
    plan
}

/// How many servers may be hurt at once, and which are: a minority, so that a quorum
/// remains. A server fault takes a slot with [`try_reserve`](Self::try_reserve) before it
/// awaits anything (looking up the leader, say), so that two faults starting together cannot
/// both pass the check; the slot is freed when its [`Reservation`] is dropped, after the heal.
pub(crate) struct ServerBudget {
    budget: usize,
    state: Mutex<BudgetState>,
}

#[derive(Default)]
struct BudgetState {
    /// Slots taken, by faults that have or have not yet chosen their server.
    reserved: usize,
    /// The servers chosen.
    hurt: HashSet<usize>,
    /// Heals waiting for a slot of their own (see [`ServerBudget::queue_heal`]).
    heals_waiting: usize,
}

impl ServerBudget {
    /// At most `budget` servers hurt at once.
    pub(crate) fn new(budget: usize) -> ServerBudget {
        ServerBudget {
            budget,
            state: Mutex::new(BudgetState::default()),
        }
    }

    /// A slot for a new fault, if one is free and no heal waits for one.
    pub(crate) fn try_reserve(&self) -> Option<Reservation<'_>> {
        self.take(false)
    }

    /// A place in line for a heal that hurts a server itself (a shrink-timeout's second
    /// rolling restart): while it waits, new faults find the budget full, so it waits only
    /// for the faults under way. Without it a 30-minute run saw a restore lose every race
    /// for the one slot of a 3-server ensemble to new faults for 40 s (seed 2031).
    pub(crate) fn queue_heal(&self) -> HealTurn<'_> {
        self.state.lock().unwrap().heals_waiting += 1;
        HealTurn { budget: self }
    }

    fn take(&self, heal: bool) -> Option<Reservation<'_>> {
        // The check and the taking under one lock: nothing between them can await.
        let mut state = self.state.lock().unwrap();
        if state.reserved >= self.budget || (!heal && state.heals_waiting > 0) {
            return None;
        }
        state.reserved += 1;
        Some(Reservation {
            budget: self,
            server: None,
        })
    }
}

/// A heal's place in line for a server slot ([`ServerBudget::queue_heal`]); leaves the line
/// on drop.
pub(crate) struct HealTurn<'a> {
    budget: &'a ServerBudget,
}

impl<'a> HealTurn<'a> {
    /// A slot, if one is free: taken before any new fault's.
    pub(crate) fn try_reserve(&self) -> Option<Reservation<'a>> {
        self.budget.take(true)
    }
}

impl Drop for HealTurn<'_> {
    fn drop(&mut self) {
        self.budget.state.lock().unwrap().heals_waiting -= 1;
    }
}

/// One server fault's slot in the [`ServerBudget`]; freed (with its server) on drop.
pub(crate) struct Reservation<'a> {
    budget: &'a ServerBudget,
    server: Option<usize>,
}

impl Reservation<'_> {
    /// Chooses this fault's server: `choose` gets the servers other faults hurt now and
    /// returns one of the others, or none.
    pub(crate) fn claim(
        &mut self,
        choose: impl FnOnce(&HashSet<usize>) -> Option<usize>,
    ) -> Option<usize> {
        let mut state = self.budget.state.lock().unwrap();
        let chosen = choose(&state.hurt)?;
        state.hurt.insert(chosen);
        self.server = Some(chosen);
        Some(chosen)
    }
}

impl Reservation<'_> {
    /// Moves this fault to `server` (a rolling restart going on to the next server): frees
    /// the server it had and takes `server`, unless another fault hurts it now.
    pub(crate) fn claim_next(&mut self, server: usize) -> Option<usize> {
        let mut state = self.budget.state.lock().unwrap();
        if let Some(had) = self.server.take() {
            state.hurt.remove(&had);
        }
        if !state.hurt.insert(server) {
            return None;
        }
        self.server = Some(server);
        Some(server)
    }

    /// The server this fault has claimed, if any.
    pub(crate) fn server(&self) -> Option<usize> {
        self.server
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut state = self.budget.state.lock().unwrap();
        state.reserved -= 1;
        if let Some(server) = self.server {
            state.hurt.remove(&server);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_heal_takes_the_freed_slot_before_a_new_fault() {
        let budget = ServerBudget::new(1);
        let running = budget.try_reserve().expect("a free slot");
        let heal = budget.queue_heal();
        assert!(heal.try_reserve().is_none(), "the budget is full");
        drop(running);
        assert!(
            budget.try_reserve().is_none(),
            "a new fault took the slot a heal was waiting for"
        );
        let healing = heal.try_reserve().expect("the freed slot");
        drop(heal);
        drop(healing);
        assert!(
            budget.try_reserve().is_some(),
            "new faults again once no heal waits"
        );
    }

    #[test]
    fn a_second_server_fault_cannot_pass_a_full_budget_before_the_first_has_chosen() {
        let budget = ServerBudget::new(1);
        let first = budget.try_reserve().expect("a free slot");
        // The first has not chosen its server yet (it is awaiting the leader, say).
        assert!(
            budget.try_reserve().is_none(),
            "a second server fault passed a budget of 1 while the first held its slot"
        );
        drop(first);
        assert!(budget.try_reserve().is_some(), "the slot was not freed");
    }

    #[test]
    fn reserved_faults_choose_different_servers_and_free_them_on_drop() {
        let budget = ServerBudget::new(2);
        let lowest_free = |hurt: &HashSet<usize>| (0..3).find(|s| !hurt.contains(s));
        let mut a = budget.try_reserve().unwrap();
        let mut b = budget.try_reserve().unwrap();
        assert!(
            budget.try_reserve().is_none(),
            "a third slot in a budget of 2"
        );
        assert_eq!(a.claim(lowest_free), Some(0));
        assert_eq!(b.claim(lowest_free), Some(1));
        drop(a);
        let mut c = budget.try_reserve().expect("a's slot freed");
        assert_eq!(c.claim(lowest_free), Some(0), "a's server freed");
        drop(b);
        drop(c);
    }

    const T: Duration = Duration::from_secs(4);

    #[test]
    fn a_seed_repeats_its_schedule_and_another_seed_does_not() {
        let a = schedule(7, &FaultKind::ALL, Duration::from_secs(300), T);
        let b = schedule(7, &FaultKind::ALL, Duration::from_secs(300), T);
        let c = schedule(8, &FaultKind::ALL, Duration::from_secs(300), T);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_chosen_kind_comes_once_per_round_and_everything_heals_by_the_end() {
        let kinds = [
            FaultKind::KillLeader,
            FaultKind::StallHolder,
            FaultKind::CutClient,
        ];
        let duration = Duration::from_secs(120);
        let plan = schedule(1, &kinds, duration, T);
        assert!(plan.len() >= 6, "{plan:?}");
        let mut want = kinds.to_vec();
        want.sort();
        for round in plan.chunks(3).filter(|r| r.len() == 3) {
            let mut seen: Vec<_> = round.iter().map(|p| p.kind).collect();
            seen.sort();
            assert_eq!(seen, want, "{plan:?}");
        }
        for p in &plan {
            assert!(p.at + p.lasts <= duration, "{p:?}");
            assert_eq!(p.kind.is_instant(), p.lasts.is_zero(), "{p:?}");
            if p.kind == FaultKind::StallHolder {
                assert!(p.lasts > T, "a stall shorter than the session: {p:?}");
            }
        }
        assert!(plan.windows(2).all(|w| w[0].at < w[1].at));
    }

    #[test]
    fn names_parse_back() {
        for k in FaultKind::ALL {
            assert_eq!(k.name().parse::<FaultKind>(), Ok(k));
        }
        assert!("kill-everything"
            .parse::<FaultKind>()
            .unwrap_err()
            .contains("kill-leader"));
    }
}
