//! Durations in connectors' options (`source.monitor-interval`,
//! `dead_letter.retention`).

use std::time::Duration;

/// A duration written as a number and a unit: `500ms`, `10s`, `2min`,
/// `1h`, `7d` (a bare number is seconds), more than zero; `key` names the
/// option in errors.
pub fn parse_duration(key: &str, value: &str) -> Result<Duration, String> {
    let invalid = || format!("{key} = '{value}' is not a duration such as '500ms', '10s' or '7d'");
    let text = value.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let millis = match unit.trim() {
        "ms" => number,
        "" | "s" => number.saturating_mul(1000),
        "min" => number.saturating_mul(60_000),
        "h" => number.saturating_mul(3_600_000),
        "d" => number.saturating_mul(86_400_000),
        _ => return Err(invalid()),
    };
    if millis == 0 {
        return Err(format!("{key} must be more than zero"));
    }
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_their_units() {
        assert_eq!(parse_duration("k", "250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("k", "10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("k", " 2min "), Ok(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("k", "7d"),
            Ok(Duration::from_secs(7 * 86_400))
        );
        assert!(parse_duration("k", "0s")
            .unwrap_err()
            .contains("more than zero"));
        assert!(parse_duration("k", "soon").unwrap_err().contains("'7d'"));
        assert!(parse_duration("k", "3 weeks").is_err());
    }
}
