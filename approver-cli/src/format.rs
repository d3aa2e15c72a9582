//! How wardenctl writes times and outcomes, in one place.

use warden_sdk::Outcome;

/// A protobuf timestamp in RFC 3339 (UTC, with its fraction of a second);
/// empty when there is none.
pub(crate) fn timestamp_str(t: Option<&prost_types::Timestamp>) -> String {
    t.and_then(|t| {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos))
            .ok()
    })
    .map(rfc3339_of)
    .unwrap_or_default()
}

/// A moment in RFC 3339.
pub(crate) fn rfc3339(at: std::time::SystemTime) -> String {
    rfc3339_of(time::OffsetDateTime::from(at))
}

fn rfc3339_of(at: time::OffsetDateTime) -> String {
    at.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| at.to_string())
}

/// A deadline as a person reads it: the local time to the second with its
/// zone, and what is left (`04:50:30 CET, in 14m59s`); the date comes
/// first when it is not today. The zone is the system's (`TZ`, else
/// /etc/localtime, else UTC). `--json` keeps RFC 3339.
pub(crate) fn deadline_str(t: Option<&prost_types::Timestamp>, now: std::time::SystemTime) -> String {
    deadline_in(t, now, &jiff::tz::TimeZone::system())
}

fn deadline_in(t: Option<&prost_types::Timestamp>, now: std::time::SystemTime, zone: &jiff::tz::TimeZone) -> String {
    let Some(t) = t else { return "none".to_owned() };
    let Ok(at) = jiff::Timestamp::new(t.seconds, t.nanos) else { return "none".to_owned() };
    let Ok(now_ts) = jiff::Timestamp::try_from(now) else { return "none".to_owned() };
    let (local, today) = (at.to_zoned_datetime(zone.clone()), now_ts.to_zoned_datetime(zone.clone()));
    let clock = if local.date() == today.date() {
        local.strftime("%H:%M:%S %Z").to_string()
    } else {
        local.strftime("%Y-%m-%d %H:%M:%S %Z").to_string()
    };
    let left = (at.as_nanosecond() - now_ts.as_nanosecond()) / 1_000_000_000;
    match u64::try_from(left) {
        Ok(left) if left > 0 => {
            format!("{clock}, in {}", warden_monitor::duration::format_duration(std::time::Duration::from_secs(left)))
        }
        _ => format!("{clock}, expired"),
    }
}

/// `ALLOW`, `DENY` or `PENDING`.
pub(crate) fn outcome_str(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allow => "ALLOW",
        Outcome::Deny => "DENY",
        Outcome::Pending => "PENDING",
    }
}

/// A proto time as nanoseconds since the Unix epoch (0 when unset), as
/// the stored records keep it.
pub(crate) fn timestamp_unix_ns(t: Option<&prost_types::Timestamp>) -> i64 {
    t.map_or(0, |t| t.seconds.saturating_mul(1_000_000_000).saturating_add(i64::from(t.nanos)))
}

/// A proto outcome as [`outcome_str`] writes it; empty when unset.
pub(crate) fn proto_outcome_str(outcome: i32) -> &'static str {
    match warden_proto::v1::Outcome::try_from(outcome) {
        Ok(warden_proto::v1::Outcome::Allow) => outcome_str(Outcome::Allow),
        Ok(warden_proto::v1::Outcome::Deny) => outcome_str(Outcome::Deny),
        Ok(warden_proto::v1::Outcome::Pending) => outcome_str(Outcome::Pending),
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::{Duration, SystemTime};

    use super::*;

    fn at(seconds: i64) -> prost_types::Timestamp {
        prost_types::Timestamp { seconds, nanos: 543_595_290 }
    }

    #[test]
    fn deadlines_are_local_to_the_second_with_the_zone_and_what_is_left() {
        // 2026-12-01T03:50:30.54Z, seen from 03:35:31Z.
        let deadline = at(1_796_097_030);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_096_131);
        let paris = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
        assert_eq!(deadline_in(Some(&deadline), now, &paris), "04:50:30 CET, in 14m59s");
        assert_eq!(deadline_in(Some(&deadline), now, &jiff::tz::TimeZone::UTC), "03:50:30 UTC, in 14m59s");
        // Another day shows the date; a deadline passed says so.
        let tokyo = jiff::tz::TimeZone::get("Asia/Tokyo").unwrap();
        assert_eq!(deadline_in(Some(&at(1_796_097_030 + 86_400)), now, &tokyo), "2026-12-02 12:50:30 JST, in 1d14m59s");
        let later = now + Duration::from_secs(3_600);
        assert_eq!(deadline_in(Some(&deadline), later, &paris), "04:50:30 CET, expired");
        assert_eq!(deadline_in(None, now, &paris), "none");
    }
}
