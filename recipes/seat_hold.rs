//! Seat holds for ticket booking: while a buyer checks out, nobody else can take the seat.
//!
//! Each seat is a lock, `/recipes/seat-hold/show-42/<seat>`; holding it *is* the seat hold.
//! bob comes first; then four buyers race for the three seats:
//!
//! - A buyer first looks for a seat nobody holds, with `try_acquire`: it never queues behind
//!   another buyer's checkout.
//! - If every seat is held, the buyer waits a bounded time per seat with `acquire_timeout`,
//!   in case a checkout is abandoned (bob's card is declined: his seat goes back on sale).
//! - The sale itself is recorded by the box office, which refuses to sell a seat twice.
//! - Then two parties race for the same pair of adjacent seats, naming them in opposite
//!   orders: a multi-lock holds both or neither, so one party books the pair and the other
//!   nothing, and neither deadlocks holding one seat while waiting for the other.
//!
//! If a buyer's process dies mid-checkout, its hold ends with its session, so seats are never
//! stuck. Run `cargo run --example seat_hold` (starts a throwaway ensemble) or set
//! `ZKFENCE_CONNECT` / pass `--connect HOSTS` to use yours. Exits 0 only if every seat was
//! sold exactly once and the pair went to one party.

mod common;

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zkfence::{FencingToken, Lease, Session, SessionOptions};

const SEATS: [&str; 3] = ["12A", "12B", "12C"];
const BUYERS: [&str; 5] = ["bob", "ann", "cat", "dan", "eve"];
/// bob's card is declined at checkout: he gives his seat up.
const ABANDONS: &str = "bob";
/// How long paying takes.
const CHECKOUT: Duration = Duration::from_millis(300);
/// How long a buyer waits for a held seat before trying the next one.
const WAIT_PER_SEAT: Duration = Duration::from_secs(2);

/// The box office's ledger of sales.
#[derive(Default)]
struct BoxOffice {
    sold: Mutex<BTreeMap<&'static str, (&'static str, FencingToken)>>,
    double_sales: Mutex<Vec<String>>,
    abandoned: Mutex<Vec<&'static str>>,
    /// Checkouts started so far.
    checkouts: AtomicUsize,
}

impl BoxOffice {
    fn is_sold(&self, seat: &str) -> bool {
        self.sold.lock().unwrap().contains_key(seat)
    }

    fn sell(&self, seat: &'static str, buyer: &'static str, token: FencingToken) {
        let mut sold = self.sold.lock().unwrap();
        if let Some((owner, _)) = sold.get(seat) {
            // Only possible if two buyers held the seat at once.
            self.double_sales
                .lock()
                .unwrap()
                .push(format!("{seat} sold to {owner} and to {buyer}"));
            return;
        }
        sold.insert(seat, (buyer, token));
    }
}

fn seat_lock(seat: &str) -> String {
    format!("/recipes/seat-hold/show-42/{seat}")
}

/// One buyer's visit: the seat bought, if any.
async fn buy(
    session: Session,
    buyer: &'static str,
    office: Arc<BoxOffice>,
) -> zkfence::Result<Option<&'static str>> {
    // Buyers prefer different seats, so they spread out a little (as real ones do).
    let first = BUYERS.iter().position(|b| *b == buyer).unwrap_or(0);
    let preference: Vec<&'static str> = (0..SEATS.len())
        .map(|i| SEATS[(first + i) % SEATS.len()])
        .collect();

    // 1. A seat nobody holds right now?
    for &seat in &preference {
        let lock = session.lock(&seat_lock(seat)).with_id(buyer);
        if let Some(hold) = lock.try_acquire().await? {
            match checkout(buyer, seat, hold, &office).await? {
                Some(seat) => return Ok(Some(seat)),
                None if buyer == ABANDONS => return Ok(None),
                None => {}
            }
        }
    }
    // 2. Every seat is held: wait a while for each, in case its checkout is abandoned.
    println!("{buyer}: every seat is held, waiting for one to come free");
    for &seat in &preference {
        let lock = session.lock(&seat_lock(seat)).with_id(buyer);
        match lock.acquire_timeout(WAIT_PER_SEAT).await {
            Ok(hold) => {
                if let Some(seat) = checkout(buyer, seat, hold, &office).await? {
                    return Ok(Some(seat));
                }
            }
            Err(zkfence::Error::Timeout { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Pays for a held seat. Returns the seat if it was bought.
async fn checkout(
    buyer: &'static str,
    seat: &'static str,
    hold: Lease,
    office: &BoxOffice,
) -> zkfence::Result<Option<&'static str>> {
    if office.is_sold(seat) {
        // Sold by the buyer who held it before us.
        hold.release().await?;
        return Ok(None);
    }
    println!("{buyer}: holds {seat} (token {}), paying...", hold.token());
    office.checkouts.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(CHECKOUT).await;
    if buyer == ABANDONS {
        println!("{buyer}: card declined, releases {seat}");
        office.abandoned.lock().unwrap().push(seat);
        hold.release().await?;
        return Ok(None);
    }
    office.sell(seat, buyer, hold.token());
    println!("{buyer}: bought {seat}");
    hold.release().await?;
    Ok(Some(seat))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (connect, _local) = common::ensemble().await?;
    let office = Arc::new(BoxOffice::default());
    let mut visits = Vec::new();
    let mut sessions = Vec::new();
    for _ in BUYERS {
        sessions.push(
            Session::connect(
                &connect,
                SessionOptions::new().session_timeout(Duration::from_secs(4)),
            )
            .await?,
        );
    }
    for (buyer, session) in BUYERS.into_iter().zip(sessions) {
        visits.push((buyer, tokio::spawn(buy(session, buyer, office.clone()))));
        if buyer == ABANDONS {
            // bob is first in the shop; everyone else arrives together while he pays.
            while office.checkouts.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let mut empty_handed = Vec::new();
    for (buyer, visit) in visits {
        if visit.await??.is_none() {
            empty_handed.push(buyer);
        }
    }

    println!("\nsales:");
    let sold = office.sold.lock().unwrap().clone();
    for (seat, (buyer, token)) in &sold {
        println!("  {seat}  {buyer:<4} (hold token {token})");
    }
    println!("  no seat: {}", empty_handed.join(", "));
    let double_sales = office.double_sales.lock().unwrap().clone();
    if !double_sales.is_empty() {
        return Err(format!("seats sold twice: {double_sales:?}").into());
    }
    if sold.len() != SEATS.len() {
        return Err(format!(
            "{} of {} seats sold; an abandoned hold was not passed on",
            sold.len(),
            SEATS.len()
        )
        .into());
    }
    let abandoned = office.abandoned.lock().unwrap().clone();
    if abandoned.is_empty() || abandoned.iter().any(|seat| !sold.contains_key(seat)) {
        return Err(format!("bob's abandoned hold {abandoned:?} did not go back on sale").into());
    }
    if sold.values().any(|(buyer, _)| *buyer == ABANDONS)
        || empty_handed.len() != BUYERS.len() - SEATS.len()
    {
        return Err("the wrong buyers ended up with seats".into());
    }
    group_booking(&connect, &office).await
}

/// Two parties race for the same pair of adjacent seats, naming them in opposite orders: a
/// multi-lock takes both seats' locks in one transaction, so one party books both, the other
/// neither, and nobody deadlocks holding one seat while waiting for the other.
async fn group_booking(connect: &str, office: &Arc<BoxOffice>) -> Result<(), Box<dyn Error>> {
    const PAIR: [&str; 2] = ["14A", "14B"];
    let mut parties = Vec::new();
    for (party, order) in [("party-1", [0, 1]), ("party-2", [1, 0])] {
        let session = Session::connect(
            connect,
            SessionOptions::new().session_timeout(Duration::from_secs(4)),
        )
        .await?;
        let office = office.clone();
        parties.push(tokio::spawn(async move {
            let paths = order.map(|i| seat_lock(PAIR[i]));
            let group = session
                .multi_lock(&[paths[0].as_str(), paths[1].as_str()])
                .with_id(party);
            let hold = group.acquire_timeout(WAIT_PER_SEAT * 2).await?;
            let booked = !PAIR.iter().any(|seat| office.is_sold(seat));
            if booked {
                for seat in PAIR {
                    let token = hold.token(&seat_lock(seat)).expect("a token per seat");
                    office.sell(seat, party, token);
                }
                println!("{party}: booked {} and {} together", PAIR[0], PAIR[1]);
            } else {
                println!("{party}: the pair is gone; nothing booked");
            }
            hold.release().await?;
            Ok::<_, zkfence::Error>(booked)
        }));
    }
    let mut booked = 0;
    for party in parties {
        if party.await?? {
            booked += 1;
        }
    }
    let sold = office.sold.lock().unwrap().clone();
    let owners: Vec<_> = PAIR.iter().filter_map(|seat| sold.get(seat)).collect();
    if booked != 1 || owners.len() != 2 || owners[0].0 != owners[1].0 {
        return Err(format!("the pair was not booked by exactly one party: {owners:?}").into());
    }
    Ok(())
}
