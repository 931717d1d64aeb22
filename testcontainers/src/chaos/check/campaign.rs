//! The campaign's own rules: progress after each heal (rule 4) and a clean end (rule 5).

use std::collections::HashMap;

use super::super::{Event, FaultKind, Record};
use super::{Findings, Rule};

/// After each heal, someone is granted within the campaign's bound of fault-free time.
pub(super) fn check_progress(h: &[Record], found: &mut Findings<'_>) {
    let mut progress_bound = None;
    let mut fault_spans: Vec<(u64, u64)> = Vec::new();
    let mut open_faults: HashMap<usize, u64> = HashMap::new();
    let mut heals: Vec<(usize, usize, FaultKind)> = Vec::new();
    let mut grant_times: Vec<u64> = Vec::new();
    for (i, r) in h.iter().enumerate() {
        match r.event {
            Event::Campaign { grant_bound_ms, .. } => {
                progress_bound = Some(grant_bound_ms * 1_000);
            }
            Event::Granted { .. } => grant_times.push(r.t_us),
            Event::FaultStarted { fault, .. } => {
                open_faults.insert(fault, r.t_us);
            }
            Event::FaultHealed { fault, kind } => {
                if let Some(start) = open_faults.remove(&fault) {
                    fault_spans.push((start, r.t_us));
                }
                heals.push((i, fault, kind));
            }
            _ => {}
        }
    }
    let end = h.last().map_or(0, |r| r.t_us);
    fault_spans.extend(open_faults.values().map(|&start| (start, end)));
    let Some(bound) = progress_bound else {
        return;
    };
    for &(i, fault, kind) in &heals {
        let healed = h[i].t_us;
        let next_grant = grant_times
            .iter()
            .copied()
            .find(|&t| t >= healed)
            .unwrap_or(end);
        let quiet = quiet_time(healed, next_grant, &fault_spans);
        if quiet > bound {
            let what = if next_grant == end && !grant_times.iter().any(|&t| t >= healed) {
                "no grant followed".to_string()
            } else {
                format!(
                    "the next grant came {:.3}s later",
                    (next_grant - healed) as f64 / 1e6
                )
            };
            found.add(
                Rule::NoProgress,
                i,
                format!(
                    "fault {fault} ({kind}) was healed at {:.3}s and {what}: {:.3}s of it \
                     without any fault, more than the bound of {:.3}s",
                    healed as f64 / 1e6,
                    quiet as f64 / 1e6,
                    bound as f64 / 1e6
                ),
                &[i],
            );
        }
    }
}

/// Every restarted server was the campaign's own; the campaign finished, left no node under
/// the recipes' paths (and could list them), and no server or contender process running.
pub(super) fn check_end(h: &[Record], found: &mut Findings<'_>) {
    let mut finished = false;
    for (i, r) in h.iter().enumerate() {
        let Event::Finished {
            leftover_nodes,
            servers_running,
            contenders_running,
            nodes_unchecked,
        } = &r.event
        else {
            continue;
        };
        finished = true;
        if let Some(why) = nodes_unchecked {
            found.add(Rule::NodesUnchecked, i, why.clone(), &[i]);
        }
        if !leftover_nodes.is_empty() {
            found.add(
                Rule::LeftoverNodes,
                i,
                format!("left under the lock's path: {}", leftover_nodes.join(", ")),
                &[i],
            );
        }
        if !servers_running.is_empty() || !contenders_running.is_empty() {
            found.add(
                Rule::LeftoverProcesses,
                i,
                format!(
                    "still running: servers {servers_running:?}, contenders \
                     {contenders_running:?}"
                ),
                &[i],
            );
        }
    }
    // A server that is not ours any more: what its clients did after is not evidence.
    for (i, r) in h.iter().enumerate() {
        if let Event::ServerReplaced { server, error, .. } = &r.event {
            found.add(
                Rule::ServerReplaced,
                i,
                format!(
                    "server {server}: {error}; the clients that reach that port are in another \
                     ensemble, and what they do there is not evidence about zkfence"
                ),
                &[i],
            );
        }
    }
    if !finished && !h.is_empty() {
        found.add(
            Rule::Unfinished,
            h.len() - 1,
            "the history has no `finished` record".into(),
            &[h.len() - 1],
        );
    }
}

/// The time within `from..to` covered by none of `spans`.
pub(super) fn quiet_time(from: u64, to: u64, spans: &[(u64, u64)]) -> u64 {
    let mut clipped: Vec<(u64, u64)> = spans
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(to)))
        .filter(|(s, e)| s < e)
        .collect();
    clipped.sort_unstable();
    let mut busy = 0;
    let mut reach = from;
    for (s, e) in clipped {
        let s = s.max(reach);
        if e > s {
            busy += e - s;
            reach = e;
        }
    }
    (to.saturating_sub(from)).saturating_sub(busy)
}

/// The first instant by which `need` of time covered by none of `spans` has passed since
/// `from`.
pub(super) fn quiet_deadline(from: u64, need: u64, spans: &[(u64, u64)]) -> u64 {
    let mut sorted: Vec<(u64, u64)> = spans.iter().copied().filter(|s| s.1 > from).collect();
    sorted.sort_unstable();
    let (mut t, mut remaining) = (from, need);
    for (s, e) in sorted {
        if s > t {
            if s - t >= remaining {
                return t + remaining;
            }
            remaining -= s - t;
        }
        t = t.max(e);
    }
    t + remaining
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{check, Rule};
    use super::{quiet_deadline, quiet_time};
    use crate::chaos::history::at;
    use crate::chaos::{Event, FaultKind};

    #[test]
    fn no_grant_within_the_bound_of_fault_free_time_after_a_heal_is_found() {
        let mut h = clean();
        // The grant after the kill comes 10 s after the heal: 5 s is the bound.
        h[15] = granted(14_600, 0, 13);
        h[16] = released(14_700, 0, 13);
        h[17] = finished(15_000);
        // Both heals before it (the stall at 4 s, the kill at 4.6 s) wait too long.
        let found = check(&h);
        assert_eq!(rules(&h), vec![Rule::NoProgress; 2], "{found:#?}");
        assert!(found[1].message.contains("kill-client"), "{}", found[1]);

        // The same wait is no violation when another fault covered most of it.
        h.insert(16, fault(5_000, 2, FaultKind::KillLeader, None));
        h.insert(17, healed(12_000, 2, FaultKind::KillLeader));
        // ...but that fault's own heal is followed by a grant 2.6 s later: fine too.
        let found = check(&h);
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn leftovers_and_a_missing_end_are_found() {
        let mut h = clean();
        let last = h.len() - 1;
        h[last] = at(
            7_000,
            Event::Finished {
                leftover_nodes: vec!["/chaos/_c_x-lock-0000000007".into()],
                servers_running: vec![4242],
                contenders_running: vec![],
                nodes_unchecked: None,
            },
        );
        assert_eq!(
            rules(&h),
            vec![Rule::LeftoverNodes, Rule::LeftoverProcesses]
        );
        h.pop();
        assert_eq!(rules(&h), vec![Rule::Unfinished]);
    }

    #[test]
    fn a_listing_that_could_not_be_made_is_its_own_kind_not_a_leftover() {
        // As a campaign writes it when it could not list the lock's children until its
        // deadline: no nodes are known to be left, and the run must still fail, saying why.
        let mut h = clean();
        let last = h.len() - 1;
        let line = format!(
            r#"{{"t_us":{},"event":"finished","leftover_nodes":[],"servers_running":[],"contenders_running":[],"nodes_unchecked":"cannot list /chaos: session expired"}}"#,
            h[last].t_us
        );
        h[last] = serde_json::from_str(&line).unwrap();
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        let shown = found[0].to_string();
        assert!(shown.contains("could not check for nodes left"), "{shown}");
        assert!(shown.contains("session expired"), "{shown}");
        assert!(!shown.contains("nodes left under"), "{shown}");
    }

    #[test]
    fn quiet_deadline_skips_the_union_of_faults() {
        assert_eq!(quiet_deadline(0, 100, &[]), 100);
        assert_eq!(
            quiet_deadline(0, 100, &[(10, 30), (20, 40), (90, 200)]),
            240
        );
        assert_eq!(quiet_deadline(50, 10, &[(0, 100)]), 110);
        for to in [0, 60, 250] {
            let spans = [(10, 30), (20, 40), (90, 200)];
            let d = quiet_deadline(0, to, &spans);
            assert_eq!(quiet_time(0, d, &spans), to);
        }
    }

    #[test]
    fn quiet_time_subtracts_the_union_of_faults() {
        assert_eq!(quiet_time(0, 100, &[]), 100);
        assert_eq!(quiet_time(0, 100, &[(10, 30), (20, 40), (90, 200)]), 60);
        assert_eq!(quiet_time(50, 60, &[(0, 100)]), 0);
    }

    #[test]
    fn a_server_whose_port_another_process_took_is_found() {
        let mut h = clean();
        h.insert(
            12,
            at(
                4_400,
                Event::ServerReplaced {
                    fault: 9,
                    server: 1,
                    error: "its client port 127.0.0.1:21811 answers as another ZooKeeper server"
                        .into(),
                },
            ),
        );
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].rule, Rule::ServerReplaced);
        assert!(found[0].message.contains("not evidence"), "{}", found[0]);
    }
}
