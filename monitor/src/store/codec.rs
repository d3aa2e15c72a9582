//! The binary form of the records written on every decision: audit records,
//! idempotency records and session records. JSON cost more than the rest of
//! the write (escaping the request text, formatting numbers, parsing on every
//! lookup); this form is a format byte, then the fields in a fixed order:
//! integers as 8 bytes big-endian, strings as a varint length and UTF-8, lists
//! as a varint count and their items, an optional integer as a 0/1 byte and
//! the integer.
//!
//! Values written before this form existed are JSON objects, which start
//! with `{`; [`decode`] still reads them, so a store carries over. Approvals,
//! grants and locks, written at the pace of people, stay JSON.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;

/// The first byte of every value in this form (never `{`).
const FORMAT: u8 = 1;

/// Why a value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(String);

impl CodecError {
    /// An error saying `message`.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// A record with a binary form.
pub trait Record: Sized + DeserializeOwned {
    /// Writes the fields, in order.
    fn write(&self, out: &mut Encoder);
    /// Reads the fields [`Record::write`] wrote.
    fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError>;
}

/// The binary form of `record`.
pub(crate) fn encode<R: Record>(record: &R) -> Vec<u8> {
    let mut out = Encoder(Vec::with_capacity(512));
    out.0.push(FORMAT);
    record.write(&mut out);
    out.0
}

/// Reads a value in the binary form, or in the JSON of older versions.
pub fn decode<R: Record>(value: &[u8]) -> Result<R, CodecError> {
    match value.split_first() {
        Some((&FORMAT, rest)) => {
            let mut input = Decoder(rest);
            let record = R::read(&mut input)?;
            if !input.0.is_empty() {
                return Err(CodecError(format!("{} bytes after the record", input.0.len())));
            }
            Ok(record)
        }
        Some((b'{', _)) => serde_json::from_slice(value).map_err(|e| CodecError(format!("JSON: {e}"))),
        Some((other, _)) => Err(CodecError(format!("unknown format byte {other:#04x}"))),
        None => Err(CodecError("empty value".into())),
    }
}

/// Writes fields.
pub struct Encoder(Vec<u8>);

impl Encoder {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    /// An unsigned integer.
    pub(crate) fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }

    /// A signed integer.
    pub(crate) fn i64(&mut self, value: i64) {
        self.0.extend_from_slice(&value.to_be_bytes());
    }

    /// An optional signed integer.
    pub(crate) fn opt_i64(&mut self, value: Option<i64>) {
        match value {
            None => self.0.push(0),
            Some(value) => {
                self.0.push(1);
                self.i64(value);
            }
        }
    }

    /// A string.
    pub(crate) fn str(&mut self, value: &str) {
        self.varint(value.len() as u64);
        self.0.extend_from_slice(value.as_bytes());
    }

    /// A list of strings.
    pub(crate) fn strs<'a>(&mut self, values: impl ExactSizeIterator<Item = &'a String>) {
        self.varint(values.len() as u64);
        for value in values {
            self.str(value);
        }
    }
}

/// Reads fields, refusing truncated or malformed input.
pub struct Decoder<'a>(&'a [u8]);

impl Decoder<'_> {
    /// Whether every byte has been read (a record may end before fields
    /// that later versions added).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&[u8], CodecError> {
        if self.0.len() < n {
            return Err(CodecError(format!("truncated in {what}")));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn varint(&mut self, what: &str) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let [byte] = self.take(1, what)? else { return Err(CodecError(format!("truncated in {what}"))) };
            let byte = *byte;
            if shift == 63 && byte > 1 {
                return Err(CodecError(format!("length too long in {what}")));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CodecError(format!("length too long in {what}")))
    }

    fn eight(&mut self, what: &str) -> Result<[u8; 8], CodecError> {
        <[u8; 8]>::try_from(self.take(8, what)?).map_err(|_| CodecError(format!("truncated in {what}")))
    }

    /// An unsigned integer.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.eight(what)?))
    }

    /// A signed integer.
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, CodecError> {
        Ok(i64::from_be_bytes(self.eight(what)?))
    }

    /// An optional signed integer.
    pub(crate) fn opt_i64(&mut self, what: &str) -> Result<Option<i64>, CodecError> {
        match self.take(1, what)? {
            [0] => Ok(None),
            [1] => Ok(Some(self.i64(what)?)),
            _ => Err(CodecError(format!("bad option tag in {what}"))),
        }
    }

    /// A string.
    pub(crate) fn str(&mut self, what: &str) -> Result<String, CodecError> {
        let len = self.varint(what)?;
        let len = usize::try_from(len).map_err(|_| CodecError(format!("length too long in {what}")))?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CodecError(format!("invalid UTF-8 in {what}")))
    }

    /// A list of strings.
    pub(crate) fn strs(&mut self, what: &str) -> Result<Vec<String>, CodecError> {
        let count = self.varint(what)?;
        // Each string takes at least one byte: a count beyond what is left
        // is damage, not a reason to allocate.
        if count > self.0.len() as u64 {
            return Err(CodecError(format!("count too large in {what}")));
        }
        (0..count).map(|_| self.str(what)).collect()
    }

    /// A set of strings.
    pub(crate) fn str_set(&mut self, what: &str) -> Result<BTreeSet<String>, CodecError> {
        Ok(self.strs(what)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Sample {
        n: u64,
        t: i64,
        at: Option<i64>,
        name: String,
        tags: Vec<String>,
    }

    impl Record for Sample {
        fn write(&self, out: &mut Encoder) {
            out.u64(self.n);
            out.i64(self.t);
            out.opt_i64(self.at);
            out.str(&self.name);
            out.strs(self.tags.iter());
        }
        fn read(input: &mut Decoder<'_>) -> Result<Self, CodecError> {
            Ok(Self {
                n: input.u64("n")?,
                t: input.i64("t")?,
                at: input.opt_i64("at")?,
                name: input.str("name")?,
                tags: input.strs("tags")?,
            })
        }
    }

    fn sample() -> Sample {
        Sample {
            n: u64::MAX,
            t: -5,
            at: Some(i64::MIN),
            name: "ü\"{}\n".repeat(50),
            tags: vec![String::new(), "x".repeat(300)],
        }
    }

    #[test]
    fn round_trips() {
        assert_eq!(decode::<Sample>(&encode(&sample())).unwrap(), sample());
        let empty = Sample { n: 0, t: 0, at: None, name: String::new(), tags: vec![] };
        assert_eq!(decode::<Sample>(&encode(&empty)).unwrap(), empty);
    }

    #[test]
    fn reads_the_json_of_older_versions() {
        let json = br#"{"n":1,"t":2,"at":null,"name":"a","tags":["b"]}"#;
        let read: Sample = decode(json).unwrap();
        assert_eq!(read, Sample { n: 1, t: 2, at: None, name: "a".into(), tags: vec!["b".into()] });
    }

    #[test]
    fn refuses_every_truncation_and_trailing_bytes() {
        let bytes = encode(&sample());
        for cut in 0..bytes.len() {
            assert!(decode::<Sample>(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode::<Sample>(&longer).unwrap_err().0.contains("after the record"));
        let mut other = bytes;
        other[0] = 2;
        assert!(decode::<Sample>(&other).unwrap_err().0.contains("format byte"));
    }

    #[test]
    fn refuses_damage_without_allocating_for_it() {
        // A count of 2^63 strings in a few bytes.
        let mut bytes = vec![FORMAT];
        bytes.extend_from_slice(&[0; 16]);
        bytes.push(0);
        bytes.push(0);
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(decode::<Sample>(&bytes).is_err());
        // A length whose tenth byte overflows 64 bits.
        let mut bytes = vec![FORMAT];
        bytes.extend_from_slice(&[0; 17]);
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]);
        assert!(decode::<Sample>(&bytes).unwrap_err().0.contains("too long"));
        // Invalid UTF-8 in a string.
        let mut bytes = vec![FORMAT];
        bytes.extend_from_slice(&[0; 16]);
        bytes.push(0);
        bytes.extend_from_slice(&[2, 0xc3, 0x28, 0]);
        assert!(decode::<Sample>(&bytes).unwrap_err().0.contains("UTF-8"));
    }
}
