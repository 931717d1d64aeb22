//! Durations on the command line: "10s", "500ms", "1m30s", "2.5s", "1h"; a bare number is
//! seconds.

use std::time::Duration;

/// Parses a duration such as `10s`, `500ms`, `1m30s`, `1.5s`, `2h` or `30` (seconds).
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration: expected e.g. \"10s\" or \"500ms\"".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return seconds(secs, text);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let value: f64 = number.parse().map_err(|_| bad(text))?;
        let scale = match unit.trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            _ => return Err(bad(text)),
        };
        total += value * scale;
        rest = tail;
    }
    seconds(total, text)
}

/// Writes a duration as the command line takes it: `400ms`, `45s`, `1.5s`, `5m`, `1h`.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms % 3_600_000 == 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

fn seconds(secs: f64, text: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(secs).map_err(|_| bad(text))
}

fn bad(text: &str) -> String {
    format!("invalid duration {text:?}: expected a number with a unit, e.g. \"10s\", \"500ms\", \"1m30s\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["", "s", "10x", "-1s", "1.2.3s", "ms10"] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
