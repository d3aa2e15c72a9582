//! Human durations as people write them in annotations, flags and config:
//! `90s`, `15m`, `1h30m`, `2d`.

use std::time::Duration;

/// A duration that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a duration: write a number with a unit, e.g. `90s`, `15m`, `1h30m` or `2d`")]
pub struct DurationError(pub(crate) String);

/// Parses `<number><unit>` pairs, units `s`, `m`, `h`, `d`; at least one
/// pair, no sign, no fractions.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let error = || DurationError(text.to_owned());
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(error());
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for c in trimmed.chars() {
        if let Some(digit) = c.to_digit(10) {
            let value = number.unwrap_or(0).checked_mul(10).and_then(|n| n.checked_add(u64::from(digit)));
            number = Some(value.ok_or_else(error)?);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(error()),
        };
        let value = number.take().ok_or_else(error)?;
        total = value.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(error)?;
    }
    if number.is_some() {
        return Err(error());
    }
    Ok(Duration::from_secs(total))
}

/// Formats whole seconds the way [`parse_duration`] reads them: `1h30m`.
pub fn format_duration(duration: Duration) -> String {
    let mut secs = duration.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        for (text, secs) in [("90s", 90), ("15m", 900), ("1h30m", 5400), ("2d", 172_800), ("0s", 0)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for text in ["", "15", "m", "1.5h", "-1m", "10 m", "1w", "99999999999999999999s"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }
}
