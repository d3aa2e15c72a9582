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

/// `ALLOW`, `DENY` or `PENDING`.
pub(crate) fn outcome_str(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allow => "ALLOW",
        Outcome::Deny => "DENY",
        Outcome::Pending => "PENDING",
    }
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
