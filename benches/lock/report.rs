//! The report: goals, one markdown table, one JSON file. A [`Goal`] is declared once, in the
//! table row that shows it, and renders both its cell and its entry under `goals` in the JSON.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::server::{cores, Bench};
use crate::stats::{ms, round3, Arm, Spread};
use crate::{Plan, Result, TICK};

/// A figure with the value it should have.
#[derive(Debug, Clone)]
pub struct Goal {
    /// Its key under `goals` in the JSON, `scenario.figure`.
    key: String,
    value: f64,
    /// The goal as the JSON states it (`"<= 1.05"`).
    target: String,
    /// The goal as the table shows it (`"≤ 1.05"`).
    shown: String,
    met: bool,
    /// A count that noise cannot move (requests, notifications, order): `--check` fails the
    /// run when it is missed. Timed figures are never checked.
    checked: bool,
    /// What the value is and how it was bounded, for `--check`'s message.
    detail: String,
}

impl Goal {
    /// `value` should be `target` (as text); `met` says whether it is.
    pub fn new(key: &str, value: f64, target: impl Into<String>, met: bool) -> Goal {
        let target = target.into();
        Goal {
            key: key.to_string(),
            value,
            shown: target.replace("<=", "≤").replace(">=", "≥"),
            target,
            met,
            checked: false,
            detail: String::new(),
        }
    }

    pub fn at_most(key: &str, value: f64, bound: f64) -> Goal {
        Goal::new(key, value, format!("<= {bound:?}"), value <= bound)
    }

    pub fn at_least(key: &str, value: f64, bound: f64) -> Goal {
        Goal::new(key, value, format!(">= {bound:?}"), value >= bound)
    }

    /// `value` within `tolerance` of `want`.
    pub fn equals(key: &str, value: f64, want: f64, tolerance: f64) -> Goal {
        Goal::new(
            key,
            value,
            format!("= {want}"),
            (value - want).abs() <= tolerance,
        )
        .detail(format!("within ±{tolerance:.3}"))
    }

    /// A property that holds or not (`value` 1 or 0).
    pub fn holds(key: &str, met: bool, target: &str) -> Goal {
        Goal::new(key, if met { 1.0 } else { 0.0 }, target, met)
    }

    /// Checked by `--check`: a count that noise cannot move.
    pub fn checked(mut self) -> Goal {
        self.checked = true;
        self
    }

    /// The table's text, when it should differ from the JSON's.
    pub fn shown_as(mut self, shown: impl Into<String>) -> Goal {
        self.shown = shown.into();
        self
    }

    /// What the figure is and how it is bounded, printed when `--check` fails on it (added
    /// to what the constructor said, such as a tolerance).
    pub fn detail(mut self, detail: impl AsRef<str>) -> Goal {
        if !self.detail.is_empty() {
            self.detail.push_str("; ");
        }
        self.detail.push_str(detail.as_ref());
        self
    }

    /// The table cell: the goal and a mark.
    fn cell(&self) -> String {
        let mark = if self.met { "✓" } else { "✗" };
        if self.checked {
            format!("{} {mark} [checked]", self.shown)
        } else {
            format!("{} {mark}", self.shown)
        }
    }

    fn json(&self) -> Value {
        json!({
            "value": round3(self.value),
            "goal": self.target,
            "met": self.met,
            "checked": self.checked,
        })
    }

    /// Why it failed, for `--check`.
    pub fn why(&self) -> String {
        let detail = if self.detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.detail)
        };
        format!(
            "{} is {:.3}, goal {}{detail}",
            self.key, self.value, self.target
        )
    }
}

/// One line of the table: scenario, measure, zkfence, zookeeper-client, Kazoo, floor or raw,
/// ratio, goal. Cells not set stay empty.
pub struct Row {
    cells: [String; 7],
    goal: Option<Goal>,
}

impl Row {
    pub fn new(scenario: &str, measure: impl Into<String>) -> Row {
        let mut cells: [String; 7] = Default::default();
        cells[0] = scenario.to_string();
        cells[1] = measure.into();
        Row { cells, goal: None }
    }

    fn set(mut self, i: usize, value: impl Into<String>) -> Row {
        self.cells[i] = value.into();
        self
    }

    pub fn ours(self, v: impl Into<String>) -> Row {
        self.set(2, v)
    }

    pub fn peer(self, v: impl Into<String>) -> Row {
        self.set(3, v)
    }

    pub fn kazoo(self, v: impl Into<String>) -> Row {
        self.set(4, v)
    }

    pub fn floor(self, v: impl Into<String>) -> Row {
        self.set(5, v)
    }

    pub fn ratio(self, v: impl Into<String>) -> Row {
        self.set(6, v)
    }

    /// The goal this row shows: it goes into the JSON's `goals` too.
    pub fn goal(mut self, goal: Goal) -> Row {
        self.goal = Some(goal);
        self
    }

    fn cells(&self) -> [String; 8] {
        let [a, b, c, d, e, f, g] = self.cells.clone();
        let goal = self.goal.as_ref().map(Goal::cell).unwrap_or_default();
        [a, b, c, d, e, f, g, goal]
    }
}

#[derive(Default)]
pub struct Report {
    rows: Vec<Row>,
    json: Map<String, Value>,
    /// Per scenario, each arm's pooled latencies, for the picture.
    latencies: Vec<crate::plot::Panel>,
}

impl Report {
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    fn goals(&self) -> impl Iterator<Item = &Goal> {
        self.rows.iter().filter_map(|r| r.goal.as_ref())
    }

    /// The checked goals that were missed.
    pub fn missed_checks(&self) -> Vec<Goal> {
        self.goals()
            .filter(|g| g.checked && !g.met)
            .cloned()
            .collect()
    }

    pub fn checked_count(&self) -> usize {
        self.goals().filter(|g| g.checked).count()
    }

    /// Merges `value` into the JSON under `key` (objects merge, anything else replaces).
    pub fn set(&mut self, key: &str, value: Value) {
        match (self.json.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(more)) => existing.extend(more),
            (_, value) => {
                self.json.insert(key.to_string(), value);
            }
        }
    }

    /// What a scenario that ran before put under `key`, for a row that cites its figure.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key)
    }

    /// Adds an arm's latencies (all rounds pooled) to `scenario`'s panel of the picture; an
    /// arm that did not run is left out.
    pub fn latencies(&mut self, scenario: &str, arm: &str, of: &Arm) {
        if !of.ran() || of.latencies().is_empty() {
            return;
        }
        let series = (arm.to_string(), of.latencies());
        match self.latencies.iter_mut().find(|p| p.scenario == scenario) {
            Some(panel) => panel.arms.push(series),
            None => self.latencies.push(crate::plot::Panel {
                scenario: scenario.to_string(),
                arms: vec![series],
            }),
        }
    }

    pub fn set_in(&mut self, outer: &str, inner: &str, value: Value) {
        let mut m = Map::new();
        m.insert(inner.to_string(), value);
        self.set(outer, Value::Object(m));
    }

    pub fn print(&self, machine: &Value, plan: &Plan, elapsed: Duration) {
        let header = [
            "Scenario",
            "Measure",
            "zkfence",
            "zookeeper-client",
            "Kazoo",
            "Floor / raw",
            "Ratio: median (min–max)",
            "Goal",
        ];
        let rows: Vec<[String; 8]> = self.rows.iter().map(Row::cells).collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: [&str; 8]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect();
            format!("| {} |", padded.join(" | "))
        };
        println!();
        println!(
            "zkfence lock bench ({} run, {} interleaved rounds, {:.0} s) on {}",
            if plan.quick { "quick" } else { "full" },
            plan.rounds,
            elapsed.as_secs_f64(),
            machine["summary"].as_str().unwrap_or("?"),
        );
        println!();
        println!("{}", line(header));
        println!(
            "{}",
            line(widths.map(|_| ""))
                .replace(' ', "-")
                .replace("|-", "| ")
                .replace("-|", " |")
        );
        for row in &rows {
            println!("{}", line(row.each_ref().map(String::as_str)));
        }
        println!();
        println!(
            "Latencies pool every round; rates are medians of rounds; ratios are medians of \
             per-round ratios of interleaved arms. Requests and notifications are counted at the \
             server (`cons`); \"(client)\" marks the library's own counters, \"(protocol)\" what \
             the protocol needs, not a measurement. CPU shares are of all {} cores over the \
             arm's wall time. Goals marked [checked] are counts that noise cannot move; \
             `--check` fails the run on them.",
            cores()
        );
        let failed: Vec<&str> = self
            .goals()
            .filter(|g| !g.met)
            .map(|g| g.key.as_str())
            .collect();
        if failed.is_empty() {
            println!("All goals met.");
        } else {
            println!("Goals not met: {}", failed.join(", "));
        }
        let checked: Vec<&str> = self
            .goals()
            .filter(|g| g.checked)
            .map(|g| g.key.as_str())
            .collect();
        println!("[checked]: {}", checked.join(", "));
    }

    /// Writes `lock.json` and, when a scenario gave latencies, `latency.svg` beside it.
    pub fn write(&self) -> Result<PathBuf> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| "target".into());
        let target = if target.is_absolute() {
            target
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(target)
        };
        let dir = target.join("bench");
        std::fs::create_dir_all(&dir)?;
        if !self.latencies.is_empty() {
            crate::plot::latency_cdfs(&dir.join("latency.svg"), &self.latencies)?;
        }
        let path = dir.join("lock.json");
        let mut all = self.json.clone();
        let goals: Map<String, Value> = self.goals().map(|g| (g.key.clone(), g.json())).collect();
        all.insert("goals".into(), Value::Object(goals));
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&Value::Object(all))? + "\n",
        )?;
        Ok(path)
    }
}

impl Spread {
    pub fn cell(&self) -> String {
        format!("{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }

    pub fn json(&self) -> Value {
        json!({ "median": round3(self.median), "min": round3(self.min), "max": round3(self.max) })
    }
}

/// Table cells and the JSON of one arm.
impl Arm {
    /// A cell; empty for an arm that did not run (Kazoo without Kazoo).
    pub fn cell(&self, text: impl FnOnce(&Arm) -> String) -> String {
        if self.ran() {
            text(self)
        } else {
            String::new()
        }
    }

    pub fn latency_cell(&self) -> String {
        self.cell(|a| format!("{:.2} / {:.2}", a.pct_ms(0.5), a.pct_ms(0.99)))
    }

    pub fn rate_cell(&self) -> String {
        self.cell(|a| format!("{:.0}", a.rate()))
    }

    pub fn requests_cell(&self) -> String {
        self.cell(|a| format!("{:.2}", a.requests_per_op()))
    }

    pub fn cpu_cell(&self) -> String {
        self.cell(|a| format!("{:.0}", a.cpu_us_per_op()))
    }

    /// The ZooKeeper JVMs' CPU share, then the client's, in percent of the machine.
    pub fn cpu_share_cell(&self) -> String {
        self.cell(|a| {
            format!(
                "{:.0} % / {:.0} %",
                100.0 * a.server_cpu_share(cores()),
                100.0 * a.client_cpu_share(cores())
            )
        })
    }

    /// Everything about this arm, for the JSON file (null if it did not run).
    pub fn json(&self) -> Value {
        if !self.ran() {
            return Value::Null;
        }
        json!({
            "ops": self.ops(),
            "p50_ms": round3(self.pct_ms(0.5)),
            "p99_ms": round3(self.pct_ms(0.99)),
            "per_s": round3(self.rate()),
            "requests_per_op": round3(self.requests_per_op()),
            "notifications_per_op": round3(self.notifications_per_op()),
            "cpu_us_per_op": round3(self.cpu_us_per_op()),
            "keepalives": self.keepalives(),
            "server_cpu_share": round3(self.server_cpu_share(cores())),
            "client_cpu_share": round3(self.client_cpu_share(cores())),
            "rounds": self.rounds_json(),
        })
    }

    /// Each round's figures.
    fn rounds_json(&self) -> Value {
        Value::Array(
            self.rounds
                .iter()
                .map(|r| {
                    json!({
                        "p50_ms": round3(ms(r.p50())),
                        "per_s": round3(r.rate()),
                        "ops": r.ops,
                        "requests": r.requests,
                        "cpu_ms": round3(ms(r.cpu)),
                        "server_cpu_ms": round3(ms(r.server_cpu)),
                        "wall_ms": round3(ms(r.wall)),
                    })
                })
                .collect(),
        )
    }
}

/// What the figures were measured on.
pub async fn machine(bench: &Bench) -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let zookeeper = bench
        .zk
        .four_letter(bench.node, "srvr")
        .await
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Zookeeper version:"))
                .map(|v| v.trim().to_string())
        })
        .map(|v| v.split(['-', ',']).next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let summary = format!(
        "{cores} cores ({cpu}), {memory_gib:.0} GiB, Linux {kernel}, ZooKeeper {zookeeper} ×3 on loopback \
         (tickTime {} ms), clients on one follower",
        TICK.as_millis()
    );
    json!({
        "cpu": cpu,
        "cores": cores,
        "memory_gib": round3(memory_gib),
        "kernel": kernel,
        "zookeeper": zookeeper,
        "summary": summary,
    })
}
