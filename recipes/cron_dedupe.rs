//! Cron dedupe: a job scheduled on every machine runs on exactly one of them each minute.
//!
//! Four machines have the same crontab entry. When the minute comes, each one (its clock a
//! little off from the others') tries `/cron/<job>/<minute>` with `try_acquire`. The one that
//! gets it runs the job; the others see it taken and skip. The winner keeps the lock until
//! the minute is over, so a machine whose clock runs late cannot take it after the job ended.
//!
//! Nothing stays behind in ZooKeeper: each minute's lock directory is a container node,
//! which the ZooKeeper leader removes once it is empty (the fencing tokens are creation
//! zxids, which do not depend on the directory).
//!
//! Minutes are compressed to one second here. Run `cargo run --example cron_dedupe` (starts
//! a throwaway ensemble) or set `ZKFENCE_CONNECT` / pass `--connect HOSTS` to use yours.
//! Exits 0 only if every minute's job ran exactly once.

mod common;

use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use zkfence::{Session, SessionOptions};

const MACHINES: [&str; 4] = ["cron-a", "cron-b", "cron-c", "cron-d"];
const MINUTES: u32 = 3;
/// One simulated minute.
const MINUTE: Duration = Duration::from_secs(1);

/// One machine's crontab loop: at each minute, run the job unless another machine does.
async fn machine(
    name: &'static str,
    session: Session,
    job: String,
    epoch: Instant,
    skew: Duration,
    runs: Arc<Mutex<Vec<(u32, &'static str)>>>,
) -> zkfence::Result<()> {
    for minute in 0..MINUTES {
        let starts = epoch + MINUTE * minute;
        tokio::time::sleep_until(starts + skew).await; // this machine's clock says "now"
        let lock = session
            .lock(&format!("/cron/{job}/03:{minute:02}"))
            .with_id(name);
        match lock.try_acquire().await? {
            Some(lease) => {
                println!(
                    "03:{minute:02}  {name}: running {job} (token {})",
                    lease.token()
                );
                runs.lock().unwrap().push((minute, name));
                tokio::time::sleep(Duration::from_millis(100)).await; // the job
                                                                      // Hold on until the minute is over: late machines must still find it taken.
                tokio::time::sleep_until(starts + MINUTE).await;
                lease.release().await?;
            }
            None => {
                println!("03:{minute:02}  {name}: {job} is already running elsewhere, skipping")
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (connect, _local) = common::ensemble().await?;
    // A fresh job name per run, so the minutes of an earlier run do not count.
    let job = format!("nightly-report-{}", std::process::id());
    let runs = Arc::new(Mutex::new(Vec::new()));
    let epoch = Instant::now() + Duration::from_millis(500);
    let mut machines = Vec::new();
    for (i, name) in MACHINES.into_iter().enumerate() {
        let session = Session::connect(
            &connect,
            SessionOptions::new().session_timeout(Duration::from_secs(4)),
        )
        .await?;
        // Clocks disagree by up to a quarter second.
        let skew = Duration::from_millis((i as u64 * 83) % 250);
        machines.push(tokio::spawn(machine(
            name,
            session,
            job.clone(),
            epoch,
            skew,
            runs.clone(),
        )));
    }
    for m in machines {
        m.await??;
    }

    let runs = runs.lock().unwrap().clone();
    for minute in 0..MINUTES {
        let ran: Vec<&str> = runs
            .iter()
            .filter(|(m, _)| *m == minute)
            .map(|(_, n)| *n)
            .collect();
        if ran.len() != 1 {
            return Err(format!(
                "minute 03:{minute:02} ran on {} machines: {ran:?}",
                ran.len()
            )
            .into());
        }
    }
    println!("every minute's job ran exactly once");
    Ok(())
}
